"""Adaptive segment size on an async line (docs/PROTOCOL.md): estimate the line's byte error rate
from recent frames, and choose the message length that carries the most payload per byte time.

A frame of L message bytes and h bytes of overhead (flags, KIND SEQ ACK, FCS, trailer, image
header) is damaged with probability q = 1 - (1-p)^(L+h) at byte error rate p. A damaged frame is
asked for again (selective repeat) and sent again alone; when that copy is damaged too (chance q
again) the sender learns it only from its reply timer and the line stands idle for a reply
timeout, S(L) byte times, which grows with the frame (the timer covers a window of them).
Go-back-N sends the g frames behind a damaged one again too (g = window - 1 on a busy line; 0 with
selective repeat). A frame delivered then costs ((L+h)(1 + q g) + q^2 S(L)) / (1-q) byte times,
and the useful share is

    E(L) = L (1-q) / ((L+h)(1 + q g) + q^2 S(L))

Long frames waste little on overhead but fail more often, and each failure costs more; E peaks
near sqrt(h/p) when stalls are rare (about 500 bytes at p = 1e-4), lower when the timer is long
or with go-back-N. The peak is flat, so a rough p and a coarse search are good enough.

With FEAT=FEC a frame may carry Reed-Solomon parity (async_fec.py): it grows by NSYM bytes in
every codeword of CODEWORD, and fails only when a codeword has more than NSYM/2 damaged bytes
or the damage changed its length (UNMENDABLE), so q is far smaller and the best length far
longer. best_choice() weighs both and says whether the parity pays: it does once the damage is
above about one byte in a million.
"""
from __future__ import annotations

import math
from typing import Callable

from .async_fec import CODEWORD, NSYM, coded_size

#: The smallest segment chosen (or MAXMSG if smaller): below it the overhead dominates and a
#: window of 8 no longer covers a round trip at high baud.
LEAST_SEGMENT = 128
#: How much evidence the estimate keeps: weights halve every this many frames of the size in use.
MEMORY_FRAMES = 16
#: Lengths tried: a geometric series this far apart (the peak of E is flat).
STEP = 1.1
#: The share of damaged bytes that parity cannot mend: damage that makes or unmakes a flag or an
#: escape (2 of 256 byte values each) changes the frame's length, not just a byte of it.
UNMENDABLE = 4 / 256


class ErrorRate:
    """The byte error rate: failures (damaged or lost frames) per byte of frames, both weighted
    down by half for every MEMORY_FRAMES frames of the size in use seen since, so old noise is
    forgotten after a clean run and the length grows back. Deterministic: byte counts in, no clock.

    Each failure is one damaged frame, so failures / bytes is p while frames mostly get through
    (low by about half a frame's chance of failing). When every frame fails it gives 1/length,
    which best_choice() turns into a much shorter length: a few frames later frames mostly get
    through, and the estimate is good again."""

    def __init__(self) -> None:
        # as if one frame had failed in the first 1,000 bytes: a new line is trusted with long
        # frames only after it has carried some (segments cut too long go out as they are)
        self.bytes = 1000.0
        self.failures = 1.0
        self.observed = False  # a real failure was seen: only then may parity be chosen

    def exposed(self, nbytes: int, frame: int) -> None:
        """A frame of `nbytes` went over the line (its fate may come later as failed());
        `frame`: the bytes of a frame of the size in use, which sets how fast evidence ages."""
        keep = 0.5 ** (nbytes / (MEMORY_FRAMES * frame))
        self.bytes = self.bytes * keep + nbytes
        self.failures *= keep

    def failed(self, n: int = 1) -> None:
        """A frame was damaged or lost (or the peer's parity mended `n` bytes)."""
        self.failures += n
        self.observed = self.observed or n > 0

    @property
    def rate(self) -> float:
        return min(0.5, self.failures / self.bytes)


def best_choice(p: float, overhead: int, stall: Callable[[int], float], behind: int, least: int,
                most: int, fec: bool = False) -> tuple[int, bool]:
    """The message length in least..most, and whether to add parity (only if `fec`), with the
    largest E(L) (module docstring), tried on a geometric series; `stall(frame bytes)`: the byte
    times a reply timeout leaves the line idle; `behind`: g, the frames sent again with a damaged
    one."""
    log_ok, log_cut = math.log1p(-p), math.log1p(-p * UNMENDABLE)
    lost = _beyond(p, NSYM // 2) if fec else 1.0

    def share(choice: tuple[int, bool]) -> float:
        n, parity = choice
        wire = n + overhead
        if parity:
            wire = coded_size(wire)
            q = -math.expm1(math.log1p(-lost) * -(-wire // CODEWORD) + log_cut * wire) if lost < 1 else 1.0
        else:
            q = -math.expm1(log_ok * wire)
        return n * (1 - q) / (wire * (1 + q * behind) + q * q * stall(wire))
    lengths, n = [most], least
    while n < most:
        lengths.append(n)
        n = max(n + 1, int(n * STEP))
    return max(((n, parity) for parity in ((False, True) if fec else (False,)) for n in lengths), key=share)


def _beyond(p: float, t: int) -> float:
    """The chance that a codeword has more than `t` damaged bytes, each damaged with chance p: the
    binomial tail, summed term by term from k = t + 1 until the terms no longer count."""
    term = math.comb(CODEWORD, t + 1) * p ** (t + 1) * (1 - p) ** (CODEWORD - t - 1)
    tail, k = 0.0, t + 1
    while k <= CODEWORD and (term > 1e-12 * tail or k < p * CODEWORD):
        tail += term
        term *= (CODEWORD - k) / (k + 1) * p / (1 - p)
        k += 1
    return min(1.0, tail)
