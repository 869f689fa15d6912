"""The routing envelope: what a message carries across hosts, on lines that negotiated routing.

The line protocols carry an image `TO_ID FROM_ID MSG_ID USER_ID LENGTH MESSAGE` (docs/DESIGN.md 4)
and know nothing of routing. On a line whose sign-on agreed on the ROUTE2 feature
(docs/ROUTING.md), the last 15 bytes counted in LENGTH are this envelope, not message text:

    'R'(1) HOPS(1) FLAGS(1) EPOCH(4) PSEQ(4) TTL(4)        big-endian

HOPS counts the lines crossed; EPOCH (the origin checkpoint's random epoch) and PSEQ (1, 2, 3,
... per origin and destination host) let the destination deliver in order and exactly once,
whatever path each message took. TTL is the time the message may still wait, in tenths of a
second (0: no limit): a time left, not a time of day, so the hosts' clocks need not agree.
FLAGS say what the message is besides text for a process; its top three bits are the message's
priority, 0 to 7 (a host that does not know them keeps them 0: the message goes on at priority 0).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from linedrivers import image
from linedrivers.image import Image, ImageError

TRAILER = struct.Struct(">cBB4sII")
SIZE = TRAILER.size  # 15
MARK = b"R"
MARK_E2E = b"E"  # the text ends in an end-to-end trailer of E2E_SIZE bytes (mccs.core.e2e, docs/E2E.md)
E2E_SIZE = 23
MARK_LARGE = b"L"  # a segment of a protected message in segments: its SIV and trailer, LARGE_SIZE bytes
LARGE_SIZE = 39
TRAILER_MARKS = {E2E_SIZE: MARK_E2E, LARGE_SIZE: MARK_LARGE}
MARK_SIZES = {MARK: 0, MARK_E2E: E2E_SIZE, MARK_LARGE: LARGE_SIZE}
TTL_MAX = 0xFFFFFFFF  # tenths of a second: 13 years

ADVERT = 0x01  # a routing update, for the next host's routing table, not for a process
RECEIPT = 0x02  # the sender wants a delivered notice when the destination process has taken it
NOTICE = 0x04  # a delivered or undeliverable notice: never gets a notice of its own
VOID = 0x08  # what is left of a message that expired on the way: keeps its place in the order, no text
SEGMENT = 0x10  # a piece of a large message: a segment trailer ends the text (mccs.core.segments)
CARRIED = RECEIPT | NOTICE | VOID  # the flags a stored message keeps from hop to hop
HELD = 0x20  # this host only, never carried: the operator holds it on SEND_LIST (`mccs queue hold`)
PRIORITY_SHIFT = 5  # on the wire, FLAGS >> 5 is the priority (HELD, stored only, is never on the wire)
PRIORITY_MAX = 7
REPLY = 0x40  # stored: the answer to a request (USER_ID = the request's MSG_ID); only that request takes it
FAILED = 0x80  # stored: a reply with ok=False
#  0x100 and 0x200 are checkpoint.changes.CUSTODY and LOOSE (stored only: custody's), 0x400 and 0x800
#  mccs.core.e2e.STORED (stored only: how a message for this host was protected), 0x1000
#  mccs.core.receiver.UNCHECKED (stored only: a protected message in segments whose text is being checked)
NO_EPOCH = "00000000"  # the epoch of an unnumbered message (but custody's own: its origin's)


def to_wire(flags: int) -> int:
    """The FLAGS a stored message goes with. A reply goes as what it is, a notice (USER_ID: the
    MSG_ID it is about) from a process rather than a daemon; with RECEIPT, which no notice asks
    for, when it failed. A host that does not know replies delivers it as a plain message."""
    if not flags & REPLY:
        return flags & CARRIED
    return flags & VOID | NOTICE | (RECEIPT if flags & FAILED else 0)


def from_wire(flags: int, from_daemon: bool) -> int:
    """The stored flags of a message that arrived with FLAGS (`from_daemon`: its FROM_ID is a
    host's process MCCS, whose notices are notices)."""
    flags &= CARRIED
    if not flags & NOTICE or from_daemon:
        return flags
    return flags & VOID | REPLY | (FAILED if flags & RECEIPT else 0)


@dataclass(frozen=True)
class Envelope:
    hops: int = 0
    flags: int = 0
    epoch: str = NO_EPOCH  # 8 hex digits
    pseq: int = 0
    ttl: int = 0  # tenths of a second left; 0: no limit
    priority: int = 0  # 0 to 7: a waiting message of higher priority goes first on every line
    e2e: bytes = b""  # the end-to-end trailer its origin gave it (mccs.core.e2e); b"": none

    @property
    def advert(self) -> bool:
        return bool(self.flags & ADVERT)


def of_stored(blk) -> Envelope:
    """The envelope of a message as this host stored it (a MSGBLOK for it: its wire flags made
    again, its end-to-end trailer), for what was checked against the envelope it came with."""
    return Envelope(blk.hops, to_wire(blk.flags), blk.epoch or NO_EPOCH, blk.pseq, 0, blk.priority, blk.seal)


def ttl_left(expires: float, wall: float) -> int:
    """The TTL field for a message that expires at `expires` (0: never), at least 1 if any."""
    if not expires:
        return 0
    return min(TTL_MAX, max(1, math.ceil((expires - wall) * 10)))


def wrap(to_id: str, from_id: str, msg_id: int, user_id: int, data: bytes, env: Envelope) -> bytes:
    flags = env.flags & ~(PRIORITY_MAX << PRIORITY_SHIFT) | env.priority << PRIORITY_SHIFT
    trailer = TRAILER.pack(TRAILER_MARKS[len(env.e2e)] if env.e2e else MARK, min(env.hops, 255), flags,
                           bytes.fromhex(env.epoch or NO_EPOCH), env.pseq, env.ttl)
    return image.encode(to_id, from_id, msg_id, user_id, bytes(data) + env.e2e + trailer)


def unwrap(img: bytes, max_message: int) -> tuple[Image, Envelope]:
    """The message and its envelope; raises ImageError."""
    m = image.decode(img, max_message + SIZE + LARGE_SIZE)
    if len(m.data) < SIZE:
        raise ImageError(f"image of {len(img)} bytes has no routing envelope")
    mark, hops, flags, epoch, pseq, ttl = TRAILER.unpack_from(m.data, len(m.data) - SIZE)
    if mark not in MARK_SIZES:
        raise ImageError(f"routing envelope mark {mark!r}, not one of {b''.join(MARK_SIZES)!r}")
    end = len(m.data) - SIZE - MARK_SIZES[mark]
    if end < 0:
        raise ImageError(f"image of {len(img)} bytes has no room for its end-to-end trailer")
    data, e2e = m.data[:end], m.data[end:len(m.data) - SIZE]
    if len(data) > max_message:
        raise ImageError(f"message of {len(data)} bytes is over the maximum of {max_message}")
    return Image(m.to_id, m.from_id, m.msg_id, m.user_id, data), \
        Envelope(hops, flags & ~(PRIORITY_MAX << PRIORITY_SHIFT), epoch.hex(), pseq, ttl, flags >> PRIORITY_SHIFT,
                 bytes(e2e))
