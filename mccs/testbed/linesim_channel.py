"""The byte stream of an in-memory serial line (`linesim`): a `Channel` of two `Pipe`s, each
a FIFO that applies seeded `Impairments` per write and stamps every chunk with its arrival
time on the virtual clock, so line state machines meet bit errors, loss, duplication, delay
and pacing without threads or real time."""
from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass
class Impairments:
    """What one direction of a channel does to each write (all probabilities per write chunk,
    except `ber` per bit and `drop_bytes` per byte)."""
    ber: float = 0.0          # bit-error rate: each bit flips with this probability
    drop: float = 0.0         # a whole chunk is lost
    drop_bytes: float = 0.0   # a single byte is lost (bytes shift up)
    dup: float = 0.0          # a chunk arrives twice
    delay: float = 0.0        # a chunk (and, the line being FIFO, all after it) is held up ...
    delay_time: float = 0.5   # ... by up to this many seconds (uniform)
    latency: float = 0.0      # one-way latency added to every chunk
    baud: float | None = None  # pace: a byte takes 10/baud s on the wire (8N1); None: instant
    chunk: int | None = None  # split writes into chunks of at most this many bytes first


@dataclass
class PipeStats:
    written: int = 0          # bytes handed to the channel
    delivered: int = 0        # bytes that came out
    chunks: int = 0
    dropped_chunks: int = 0
    dropped_bytes: int = 0
    duplicated_chunks: int = 0
    delayed_chunks: int = 0
    flipped_bits: int = 0


class Pipe:
    """One direction of a channel: FIFO bytes with seeded impairments and arrival times."""

    def __init__(self, imp: Impairments, rng: random.Random):
        self.imp, self.rng = imp, rng
        self.stats = PipeStats()
        self.connected = True
        self._queue: deque[tuple[float, bytes]] = deque()
        self._line_free = 0.0   # when the paced transmitter is free again
        self._last_arrival = 0.0

    def write(self, data: bytes, now: float) -> None:
        """Put bytes on the line at `now`; a disconnected pipe swallows them."""
        imp, st = self.imp, self.stats
        st.written += len(data)
        if not self.connected or not data:
            return
        size = imp.chunk or len(data)
        for i in range(0, len(data), size):
            chunk = data[i:i + size]
            st.chunks += 1
            start = max(now, self._line_free)
            self._line_free = start + (len(chunk) * 10 / imp.baud if imp.baud else 0.0)
            if imp.drop and self.rng.random() < imp.drop:
                st.dropped_chunks += 1
                continue
            chunk = self._corrupt(chunk)
            arrival = self._line_free + imp.latency
            if imp.delay and self.rng.random() < imp.delay:
                st.delayed_chunks += 1
                arrival += self.rng.uniform(0, imp.delay_time)
            arrival = max(arrival, self._last_arrival)  # a serial line never reorders
            self._last_arrival = arrival
            self._queue.append((arrival, chunk))
            if imp.dup and self.rng.random() < imp.dup:
                st.duplicated_chunks += 1
                self._queue.append((arrival, chunk))

    def _positions(self, p: float, n: int) -> Iterable[int]:
        """Indexes 0..n-1 each chosen with probability p (geometric gaps: no per-item loop)."""
        if p <= 0:
            return
        log_q = math.log1p(-p) if p < 1 else None
        pos = -1
        while True:
            pos += 1 if log_q is None else 1 + int(math.log(1.0 - self.rng.random()) / log_q)
            if pos >= n:
                return
            yield pos

    def _corrupt(self, chunk: bytes) -> bytes:
        imp, st = self.imp, self.stats
        if not imp.ber and not imp.drop_bytes:
            return chunk
        buf = bytearray(chunk)
        for bit in self._positions(imp.ber, len(buf) * 8):
            buf[bit >> 3] ^= 1 << (bit & 7)
            st.flipped_bits += 1
        for j in sorted(self._positions(imp.drop_bytes, len(buf)), reverse=True):
            del buf[j]
            st.dropped_bytes += 1
        return bytes(buf)

    def next_arrival(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def last_arrival(self) -> float | None:
        return self._queue[-1][0] if self._queue else None

    def take(self, now: float) -> bytes:
        """Every byte that has arrived by `now`, in order."""
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(self._queue.popleft()[1])
        data = b"".join(out)
        self.stats.delivered += len(data)
        return data


class Channel:
    """Two pipes: `ab` carries a's writes to b, `ba` the other way. Keyword impairments apply
    to both directions; `ab=`/`ba=` give one direction its own `Impairments`. Each direction
    has its own RNG derived from `seed`, so one side's traffic does not shift the other's faults."""

    def __init__(self, seed: int = 0, *, ab: Impairments | None = None, ba: Impairments | None = None,
                 **impairments: Any):
        both = Impairments(**impairments)
        self.seed = seed
        self.ab = Pipe(ab or both, random.Random(f"{seed}/ab"))
        self.ba = Pipe(ba or both, random.Random(f"{seed}/ba"))

    def towards(self, side: str) -> Pipe:
        """The pipe whose bytes arrive at `side`."""
        return self.ba if side == "a" else self.ab

    def outof(self, side: str) -> Pipe:
        """The pipe `side` writes to."""
        return self.ab if side == "a" else self.ba

    def disconnect(self) -> None:
        """A cable pulled: every write is lost until reconnect(); bytes already under way arrive."""
        self.ab.connected = self.ba.connected = False

    def reconnect(self) -> None:
        self.ab.connected = self.ba.connected = True
