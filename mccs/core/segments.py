"""Large messages: cut in segments on the line, checkpointed as they arrive, delivered only whole.

A message longer than what one frame carries goes, on a line whose sign-on agreed on LARGE=
(docs/PROTOCOL.md), as a run of images with the same TO_ID FROM_ID MSG_ID USER_ID, each
carrying a piece of the text followed by this trailer and the routing envelope (whose FLAGS
have SEGMENT set):

    'S'(1) TOTAL(4) OFFSET(4) CRC(4)        big-endian

TOTAL is the whole message's length, OFFSET where this piece starts, CRC the CRC-32 of the
whole message: with TO_ID, TOTAL and CRC it names one transfer, so a resumed transfer whose
message changed is told from a resend of the same one. The line acknowledges every segment
only once it is durable here (written into the partial's blob), so after a line drop or a
restart of either end the sender goes on from the last segment acknowledged, and a segment
already held is acknowledged again without being stored twice. The receiver runs the CRC over
the bytes as they come in order; the last segment completes the message only if it matches.
Each piece is stored as it comes (checkpoint table text_pieces): no room is taken for the rest.

A sender that will not finish a transfer at the next host holding its start (the message goes
on by another route, or is given up) owes that host a *forget* (`Forgets`), kept in its
checkpoint until the host acknowledged it on a line whose sign-on agreed on FEAT=FORGET; the
host then drops what it holds at once instead of keeping it for its ttl (docs/ROUTING.md 2a).
"""
from __future__ import annotations

import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from checkpoint import changes as ch
from checkpoint.changes import Change, Stored

from mccs.core import envelope

TRAILER = struct.Struct(">cIII")
SIZE = TRAILER.size  # 13
MARK = b"S"
DONE_KEEP = 1024  # completed transfers remembered, so a resent last segment is known as a duplicate
#: The sign-on feature of forgets (docs/ROUTING.md 2a): a line whose ends both offer it carries them.
FORGET = "FORGET"
#: A forget's FLAGS: ADVERT and SEGMENT, a combination no message has (only a FORGET peer gets one).
FORGET_FLAGS = envelope.ADVERT | envelope.SEGMENT
#: A forget's text: the transfer's FROM_ID MSG_ID TO_ID TOTAL CRC.
FORGET_TEXT = struct.Struct(">6sH6sII")
NAME = "MCCS"  # the daemon's process name: a forget goes from one daemon to the next host's


def crc_of(data: bytes) -> int:
    return zlib.crc32(data)


@dataclass(frozen=True)
class Segment:
    total: int
    offset: int
    crc: int
    chunk: bytes


def wrap(chunk: bytes, total: int, offset: int, crc: int) -> bytes:
    return bytes(chunk) + TRAILER.pack(MARK, total, offset, crc)


def unwrap(data: bytes) -> Segment:
    """The segment in a message text; raises ValueError."""
    if len(data) < SIZE:
        raise ValueError(f"segment of {len(data)} bytes has no trailer")
    mark, total, offset, crc = TRAILER.unpack_from(data, len(data) - SIZE)
    if mark != MARK:
        raise ValueError(f"segment trailer mark {mark!r}, not {MARK!r}")
    return Segment(total, offset, crc, data[:-SIZE])


@dataclass(eq=False)
class Partial:
    """A large message being received: its bytes so far are in the checkpoint's partial_data row `id`."""
    id: int
    origin: str
    msg_id: int
    to_id: str
    total: int
    crc: int  # of the whole message, as announced
    got: int = 0  # bytes held, from offset 0
    run: int = 0  # CRC-32 of the bytes held
    ts: float = 0.0  # wall clock of the last segment
    peer: str = ""  # the next host that sent the last segment: it counts on what is held ("": not known)

    @property
    def ident(self) -> tuple[str, int, int]:
        return (self.to_id, self.total, self.crc)

    def stored(self) -> Stored:
        return Stored(self.id, self.total, self.crc, pieces=True)


class Refused(ValueError):
    """A segment that cannot be taken: wrong total, offset or length, a gap, a changed message."""


class Reassembly:
    """The partials of this host, and the transfers completed lately, mirrored in the checkpoint."""

    def __init__(self, max_message: int, partials: Iterable[Partial] = (), done: Iterable[tuple] = ()):
        self.max_message = max_message
        self.partials: dict[tuple[str, int], Partial] = {(p.origin, p.msg_id): p for p in partials}
        self.done: OrderedDict[tuple[str, int], tuple] = OrderedDict(((o, m), tuple(i)) for o, m, *i in done)

    def arrive(self, key: tuple[str, int], to_id: str, seg: Segment, new_id: Callable[[], int], wall: float,
               changes: list[Change], peer: str = "") -> Partial | None:
        """Take one segment from the line to `peer`, adding to `changes` what to store: the partial
        if it is now complete, else None (also for a segment held already). Raises Refused (keep
        the changes made)."""
        ident = (to_id, seg.total, seg.crc)
        end = seg.offset + len(seg.chunk)
        if seg.total > self.max_message:
            raise Refused(f"announces {seg.total} bytes, over the maximum of {self.max_message}")
        if not seg.chunk or end > seg.total:
            raise Refused(f"piece {seg.offset}+{len(seg.chunk)} does not fit its total of {seg.total}")
        if self.done.get(key) == ident:
            return None
        p = self.partials.get(key)
        if p is not None and p.ident != ident:  # the sender's message is not the one we hold the start of
            changes += self.drop(p)
            if seg.offset:
                raise Refused(f"the transfer changed (total {p.total} -> {seg.total}, crc {p.crc:08x} -> "
                              f"{seg.crc:08x}) and this piece is not its start")
            p = None
        if p is None:
            if seg.offset:
                raise Refused(f"piece at {seg.offset} of a transfer whose start is not held here")
            p = Partial(new_id(), key[0], key[1], to_id, seg.total, seg.crc, ts=wall, peer=peer)
            self.partials[key] = p
            changes.append(ch.add_partial(p.id, p.origin, p.msg_id, to_id, p.total, p.crc, wall, peer))
        if seg.offset > p.got:
            raise Refused(f"piece at {seg.offset}, but only {p.got} bytes are held: a gap")
        p.ts = wall
        if end <= p.got:  # held already: acknowledged again, not stored twice
            if p.peer != peer:  # (the message came another way too: that sender counts on it now)
                p.peer = peer
                changes.append(ch.set_partial_got(p.id, p.got, p.run, wall, peer))
            return None
        fresh = seg.chunk[p.got - seg.offset:]
        p.run = zlib.crc32(fresh, p.run)
        changes.append(ch.add_piece(p.id, p.got, fresh))
        p.got, p.peer = end, peer
        changes.append(ch.set_partial_got(p.id, p.got, p.run, wall, peer))
        if p.got < p.total:
            return None
        if p.run != p.crc:
            changes += self.drop(p)
            raise Refused(f"the whole message's CRC-32 is {p.run:08x}, not the {p.crc:08x} announced")
        return p

    def finish(self, p: Partial) -> list[Change]:
        """A completed partial has been copied where it belongs: forget it, remember it is done."""
        key = (p.origin, p.msg_id)
        self.partials.pop(key, None)
        self.done[key] = p.ident
        self.done.move_to_end(key)
        out = [*ch.delete_partial(p.id, keep_text=True), ch.add_seg_done(p.origin, p.msg_id, *p.ident, p.id)]
        while len(self.done) > DONE_KEEP:
            (origin, msg_id), _ = self.done.popitem(last=False)
            out.append(ch.delete_seg_done(origin, msg_id))
        return out

    def drop(self, p: Partial) -> list[Change]:
        self.partials.pop((p.origin, p.msg_id), None)
        return ch.delete_partial(p.id)

    def forget(self, origin: str) -> list[Change]:
        """The transfers of an origin started afresh: its partials will never be finished, and its
        MSG_IDs name new messages. Those it sent as a neighbour go too: its new checkpoint holds
        nothing of what it was sending, so it never resumes them (it starts them again from 0)."""
        out = [c for p in [p for p in self.partials.values() if origin in (p.origin, p.peer)] for c in self.drop(p)]
        for key in [k for k in self.done if k[0] == origin]:
            del self.done[key]
            out.append(ch.delete_seg_done(*key))
        return out

    def forgotten(self, peer: str, key: tuple[str, int], ident: tuple[str, int, int]) -> Partial | None:
        """`peer` will not finish this transfer here (a forget): the partial, if it is the one
        named and `peer` is the sender that counts on it. Another next host that sent it since
        (the message came two ways) may still resume it: then it stays."""
        p = self.partials.get(key)
        if p is None or p.ident != ident or p.peer not in ("", peer):
            return None
        return p

    def stale(self, before: float) -> list[Partial]:
        """Partials that heard nothing since `before` (their sender gave up, or the message expired)."""
        return [p for p in self.partials.values() if p.ts < before]

    def status(self) -> list[dict]:
        return [{"origin": p.origin, "msg_id": p.msg_id, "to_id": p.to_id, "bytes": p.got, "total": p.total}
                for p in self.partials.values()]


class Blobs:
    """Pieces of Stored texts for the Message-Sender. The core does not read the checkpoint: a
    piece it needs and does not have is `wanted`, the driver reads it after the pass and hands it
    in (`arrived`), and the next pass sends it; the pieces after the one sent are wanted ahead,
    so a transfer waits for the disk only at its first piece. A text a process sent in this very pass
    (not committed yet) is read from memory. A text completed in this pass (its last segment is
    written with this pass's commit) can be read only from the next pass on: `ready()` says so,
    and `pending` asks for that pass."""

    KEEP = 64  # pieces held at most (read ahead for the lines, each at most a segment)
    AHEAD = 4  # pieces read ahead of the one sent: a line's window of segments is handed in one pass

    def __init__(self) -> None:
        self._fresh: dict[int, bytes] = {}
        self._later: set[int] = set()
        self._pieces: OrderedDict[tuple[int, int], bytes] = OrderedDict()  # (text, offset) -> bytes, as read
        self.wanted: dict[tuple[int, int], tuple[Stored, int, int]] = {}  # for the driver to read: (text, offset, n)

    def arrived(self, where: Stored, offset: int, data: bytes) -> None:
        """A piece the driver read from the checkpoint."""
        self._pieces[where.rowid, offset] = data
        while len(self._pieces) > self.KEEP:
            self._pieces.popitem(last=False)

    def add(self, where: Stored, data: bytes) -> None:
        self._fresh[where.rowid] = data

    def later(self, where: Stored) -> None:
        self._later.add(where.rowid)

    def ready(self, data: bytes | Stored) -> bool:
        return not isinstance(data, Stored) or data.rowid not in self._later

    @property
    def pending(self) -> bool:
        return bool(self._later)

    def committed(self) -> None:
        """The last pass is in the checkpoint: its texts are read from there now."""
        self._fresh.clear()
        self._later.clear()

    def piece(self, data: bytes | Stored, offset: int, n: int) -> bytes | None:
        """Bytes offset..offset+n of a text (fewer at its end); None if they must be read first."""
        if not isinstance(data, Stored):
            return data[offset:offset + n]
        fresh = self._fresh.get(data.rowid)
        if fresh is not None:
            return fresh[offset:offset + n]
        got = self._pieces.pop((data.rowid, offset), None)
        if got is None or len(got) < min(n, data.size - offset):
            self.wanted[data.rowid, offset] = (data, offset, n)
            return None
        for ahead in range(offset + n, min(data.size, offset + (self.AHEAD + 1) * n), n):  # the next ones
            if (data.rowid, ahead) not in self._pieces:
                self.wanted.setdefault((data.rowid, ahead), (data, ahead, n))
        return got[:n]


@dataclass(frozen=True)
class Forget:
    """A transfer that `peer` holds the start of and will not get the rest of from this host."""
    peer: str
    from_id: str
    msg_id: int
    to_id: str
    total: int
    crc: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.peer, self.from_id, self.msg_id)

    def image(self, host: str) -> bytes:
        """The forget as the line carries it: from this host's daemon to the peer's, MSG_ID 0 (as a
        routing update), FLAGS ADVERT and SEGMENT, the transfer named in the text."""
        text = FORGET_TEXT.pack(self.from_id.encode("ascii"), self.msg_id, self.to_id.encode("ascii"), self.total,
                                self.crc)
        return envelope.wrap(self.peer + NAME, host + NAME, 0, 0, text, envelope.Envelope(flags=FORGET_FLAGS))


def is_forget(env: envelope.Envelope) -> bool:
    return env.flags & FORGET_FLAGS == FORGET_FLAGS


def read_forget(peer: str, data: bytes) -> Forget:
    """The transfer a forget from `peer` names; raises ValueError."""
    try:
        from_id, msg_id, to_id, total, crc = FORGET_TEXT.unpack(data)
    except struct.error as e:
        raise ValueError(f"a forget of {len(data)} bytes, not {FORGET_TEXT.size}") from e
    return Forget(peer, from_id.decode("ascii"), msg_id, to_id.decode("ascii"), total, crc)


@dataclass
class Forgets:
    """The forgets this host owes, mirrored in the checkpoint (FORGETS) until the peer acknowledged
    one on the line: a sender records one when a next host holds part of a message that will not
    go on there (mccs.core.lines). Handed on each sign-on that agreed on FORGET (`session`: the line's
    count of sign-ons) before any segment, so a message sent there again from its first byte is
    never dropped after it (the line delivers in order)."""
    owed: dict[tuple[str, str, int], Forget] = field(default_factory=dict)
    handed: dict[tuple[str, str, int], int] = field(default_factory=dict)  # key -> session it went in

    @classmethod
    def restored(cls, rows: list[tuple]) -> "Forgets":
        return cls({f.key: f for f in (Forget(*r) for r in rows)})

    def owe(self, f: Forget) -> list[Change]:
        if f.key in self.owed:
            return []
        self.owed[f.key] = f
        return [ch.add_forget(*f.key, f.to_id, f.total, f.crc)]

    def to_hand(self, peer: str, session: int) -> list[Forget]:
        """The forgets for `peer` not yet handed on this sign-on; taken as handed."""
        if not self.owed:  # (asked for every line, every pass)
            return []
        out = [f for key, f in self.owed.items() if f.peer == peer and self.handed.get(key) != session]
        for f in out:
            self.handed[f.key] = session
        return out

    def done(self, peer: str, from_id: str, msg_id: int) -> list[Change]:
        """`peer` acknowledged the forget (or holds the message again: it goes there from its first byte)."""
        key = (peer, from_id, msg_id)
        self.handed.pop(key, None)
        if self.owed.pop(key, None) is None:
            return []
        return [ch.delete_forget(*key)]

    def drop_peer(self, peer: str) -> list[Change]:
        """`peer` signed on routing without FORGET (an older MCCS): its forgets are not kept."""
        return [c for key in [k for k in self.owed if k[0] == peer] for c in self.done(*key)]
