"""Cuts the received BSC byte stream into control sequences and text blocks.

The reader hunts for `SYN SYN`, reads what follows, and after anything it cannot read (a
control character where none belongs, a broken DLE sequence, an ID that runs on, a block over
the maximum) drops the bytes, counts them and hunts again: it never raises. Work is done with
`bytes.find`, a regular expression and slices; only the few bytes of an ID are stepped through.
Idle SYNs (a modem's fill between sequences, as long as the line is idle) are kept two at most.
On a line with a secret (`trailer` > 0) every control sequence but the ID forms is followed by
its authentication trailer and a CRC-16 (bsc_codes.CodeSet.sequence), and every block's text
ends with the trailer: both come out in Seq.trailer, for the machine to check.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from .bsc_codes import MAX_ANNOUNCEMENT, MAX_ID, PAD, CodeSet
from .crc import crc16


class Seq(NamedTuple):
    """One received sequence. kind: ENQ EOT NAK ACK0 ACK1 WACK RVI TTD DISC ID_ENQ ID_ACK0
    ID_NAK FEAT ETB ETX, or ABORT for a text block that broke off before its ending."""
    kind: str
    nbytes: int          # bytes on the wire from its SYN SYN (idle SYNs before them are fill)
                         # to the last character (the pad, optional after some sequences, is
                         # skipped while hunting)
    ok: bool = True      # False: bad BCC, or an aborted block
    data: bytes = b""    # a block's text (DLE DLE undone, DLE SYN dropped), or the ID
    trailer: bytes = b""  # on a line with a secret: the authentication trailer


class BscReader:
    """Stateful deframer; `counters` (the machine's dict) gets garbage, crc_errors,
    bad_sequences and oversized."""

    def __init__(self, cs: CodeSet, max_text: int, counters: dict, *, trailer: int = 0,
                 max_id: int = MAX_ID):
        self.cs, self.max_text, self.counters = cs, max_text, counters
        self.trailer, self.max_id = trailer, max_id
        self._buf = bytearray()
        self._text: bytearray | None = None  # inside a transparent block: its text so far
        self._nbytes = 0                      # wire bytes of that block so far
        self._last_block = 0                  # wire bytes of the last block that ended
        self._synsyn = bytes([cs.syn, cs.syn])
        self._not_syn = re.compile(b"[^%s]" % re.escape(bytes([cs.syn])))
        self._dle = bytes([cs.dle])
        self._singles = {cs.enq: "ENQ", cs.eot: "EOT", cs.nak: "NAK"}
        self._after_dle = {cs.ack0: "ACK0", cs.ack1: "ACK1", cs.wack: "WACK", cs.rvi: "RVI", cs.eot: "DISC"}
        self._id_end = {cs.enq: "ID_ENQ", cs.nak: "ID_NAK"}
        self._endings = {cs.etx: ("ETX", bytes([cs.etx])), cs.etb: ("ETB", bytes([cs.etb]))}

    @property
    def mid_frame(self) -> bool:
        """Part of a sequence or block is held, waiting for the rest."""
        return self._text is not None or bool(self._buf)

    def wanted(self) -> int:
        """Bytes before the sequence being read may end, at a guess: inside a block, as many as make
        it as long as the last block (its length shows only at its end, and a sender's blocks are
        mostly alike); else 1."""
        return max(1, self._last_block - self._nbytes) if self._text is not None else 1

    def feed(self, data: bytes) -> list[Seq]:
        """Take received bytes; return the sequences they complete, oldest first."""
        buf = self._buf
        buf += data
        out: list[Seq] = []
        pos, more = 0, True
        while more and pos < len(buf):
            if self._text is not None:
                pos, more = self._in_text(pos, out)
            else:
                pos, more = self._hunt(pos, out)
        del buf[:pos]
        return out

    def abort(self) -> list[Seq]:
        """Give up on a partial sequence (the line went quiet in the middle of it)."""
        out: list[Seq] = []
        if self._text is not None:
            self._abort_block(len(self._buf), out)
        else:
            self._drop(0, len(self._buf))
        self._buf.clear()
        return out

    # --- hunting and control sequences ----------------------------------------------------
    def _drop(self, start: int, end: int) -> None:
        """Bytes skipped while hunting; idle SYNs and pads are not garbage."""
        if end > start:
            seg = self._buf[start:end]
            self.counters["garbage"] += len(seg) - seg.count(self.cs.syn) - seg.count(PAD)

    def _bad(self, start: int, resume: int) -> tuple[int, bool]:
        self.counters["bad_sequences"] += 1
        self.counters["garbage"] += resume - start
        return resume, True

    def _emit(self, out: list, kind: str, start: int, end: int, ok: bool = True, data: bytes = b"",
              trailer: bytes = b"") -> tuple[int, bool]:
        out.append(Seq(kind, end - start, ok, data, trailer))
        return end, True

    def _bare(self, out: list, kind: str, i: int, j: int, e: int) -> tuple[int, bool]:
        """A control sequence from `i` whose characters are buf[j:e]; with a secret, its trailer
        and check follow. A failed check gives the sequence as not ok and reads on from `e`, since
        the bytes taken for its trailer may be the next sequence."""
        if not self.trailer:
            return self._emit(out, kind, i, e)
        buf, n = self._buf, e + self.trailer + 2
        if n > len(buf):
            return i, False
        trailer = bytes(buf[e:n - 2])
        if crc16(bytes(buf[j:e]) + trailer) != buf[n - 2] | buf[n - 1] << 8:
            self.counters["crc_errors"] += 1
            return self._emit(out, kind, i, e, ok=False)
        return self._emit(out, kind, i, n, trailer=trailer)

    def _hunt(self, pos: int, out: list) -> tuple[int, bool]:
        buf, syn = self._buf, self.cs.syn
        i = buf.find(self._synsyn, pos)
        if i < 0:
            keep = len(buf) - (1 if buf[-1] == syn else 0)  # a last SYN may begin the next pair
            self._drop(pos, keep)
            return keep, False
        self._drop(pos, i)
        after = self._not_syn.search(buf, i + 2)
        if after is None:  # SYNs to the end: idle fill, of which the last two may begin a sequence
            return len(buf) - 2, False
        j = after.start()
        return self._control(j - 2, j, out)  # SYNs before the last two were fill

    def _control(self, i: int, j: int, out: list) -> tuple[int, bool]:
        """Read the sequence that starts at `j`, after the SYNs that start at `i`."""
        cs, buf, n = self.cs, self._buf, len(self._buf)
        c = buf[j]
        kind = self._singles.get(c)
        if kind:
            return self._bare(out, kind, i, j, j + 1)
        if c == cs.dle or c == cs.stx:
            if j + 1 == n:
                return i, False
            c2 = buf[j + 1]
            if c == cs.dle:
                kind = self._after_dle.get(c2)
                if kind:
                    return self._bare(out, kind, i, j, j + 2)
                if c2 == cs.stx:
                    self._text, self._nbytes = bytearray(), j + 2 - i
                    return j + 2, True
            elif c2 == cs.enq:
                return self._bare(out, "TTD", i, j, j + 2)
            return self._bad(i, j + 1)
        if c == cs.soh:
            return self._announcement(i, j, out)
        if c <= cs.ctl_max:
            return self._bad(i, j + 1)
        k = j  # an ID: graphic characters up to ENQ, NAK or DLE ACK0
        while k < n and k - j <= self.max_id and buf[k] > cs.ctl_max:
            k += 1
        if k - j > self.max_id:
            return self._bad(i, j + 1)
        if k == n:
            return i, False
        t = buf[k]
        if t in self._id_end:
            return self._emit(out, self._id_end[t], i, k + 1, data=bytes(buf[j:k]))
        if t == cs.dle:
            if k + 1 == n:
                return i, False
            if buf[k + 1] == cs.ack0:
                return self._emit(out, "ID_ACK0", i, k + 2, data=bytes(buf[j:k]))
        return self._bad(i, j + 1)

    def _announcement(self, i: int, j: int, out: list) -> tuple[int, bool]:
        """`SOH text ETX BCC` (CodeSet.announcement); a bad BCC gives FEAT not ok."""
        cs, buf, n = self.cs, self._buf, len(self._buf)
        k = j + 1
        while k < n and k - j <= MAX_ANNOUNCEMENT and buf[k] > cs.ctl_max:
            k += 1
        if k - j > MAX_ANNOUNCEMENT or (k < n and buf[k] != cs.etx):
            return self._bad(i, j + 1)
        if k + 3 > n:
            return i, False
        text = bytes(buf[j + 1:k])
        ok = crc16(bytes([cs.etx]), crc16(text)) == buf[k + 1] | buf[k + 2] << 8
        if not ok:
            self.counters["crc_errors"] += 1
        return self._emit(out, "FEAT", i, k + 3, ok, text)

    # --- transparent text -----------------------------------------------------------------
    def _abort_block(self, resume_garbage: int, out: list) -> None:
        self.counters["garbage"] += self._nbytes + resume_garbage
        out.append(Seq("ABORT", self._nbytes + resume_garbage, False))
        self._text = None

    def _in_text(self, pos: int, out: list) -> tuple[int, bool]:
        cs, buf, text = self.cs, self._buf, self._text
        assert text is not None  # called only inside a block (feed checks _text)
        n = len(buf)
        while True:
            k = buf.find(self._dle, pos)
            end = n if k < 0 else k
            text += buf[pos:end]
            self._nbytes += end - pos
            if len(text) > self.max_text:
                self.counters["oversized"] += 1
                self._abort_block(0, out)
                return end, True
            if k < 0 or k + 1 == n:
                return end, False
            c2 = buf[k + 1]
            if c2 == cs.dle or c2 == cs.syn:  # DLE DLE is one data DLE; DLE SYN is idle fill
                if c2 == cs.dle:
                    text.append(c2)
                self._nbytes += 2
                pos = k + 2
                continue
            ending = self._endings.get(c2)
            if ending is None:
                self.counters["bad_sequences"] += 1
                self._abort_block(1, out)
                return k + 1, True
            if k + 4 > n:
                return k, False
            ok = crc16(ending[1], crc16(text)) == buf[k + 2] | buf[k + 3] << 8
            if not ok:
                self.counters["crc_errors"] += 1
            start = k - self._nbytes
            self._text = None
            cut = len(text) - self.trailer if self.trailer and len(text) >= self.trailer else len(text)
            self._last_block = k + 4 - start
            return self._emit(out, ending[0], start, k + 4, ok, bytes(text[:cut]), bytes(text[cut:]))
