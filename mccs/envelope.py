"""The routing envelope: what a message carries across hosts, on lines that negotiated routing.

The line protocols carry an image `TO_ID FROM_ID MSG_ID USER_ID LENGTH MESSAGE` (DESIGN.md 4)
and know nothing of routing. On a line whose sign-on agreed on the ROUTE feature
(docs/ROUTING.md), the last 11 bytes counted in LENGTH are this envelope, not message text:

    'R'(1) HOPS(1) FLAGS(1) EPOCH(4) PSEQ(4)        big-endian

HOPS counts the lines crossed; EPOCH (the origin checkpoint's random epoch) and PSEQ (1, 2, 3,
... per origin and destination host) let the destination deliver in order and exactly once,
whatever path each message took. FLAGS marks a routing update (ADVERT), which is not a message
for any process.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from linedrivers import image
from linedrivers.image import Image, ImageError

TRAILER = struct.Struct(">cBB4sI")
SIZE = TRAILER.size  # 11
MARK = b"R"
ADVERT = 0x01


@dataclass(frozen=True)
class Envelope:
    hops: int = 0
    flags: int = 0
    epoch: str = "00000000"  # 8 hex digits
    pseq: int = 0

    @property
    def advert(self) -> bool:
        return bool(self.flags & ADVERT)


def wrap(to_id: str, from_id: str, msg_id: int, user_id: int, data: bytes, env: Envelope) -> bytes:
    trailer = TRAILER.pack(MARK, min(env.hops, 255), env.flags, bytes.fromhex(env.epoch or "00000000"), env.pseq)
    return image.encode(to_id, from_id, msg_id, user_id, bytes(data) + trailer)


def unwrap(img: bytes, max_message: int) -> tuple[Image, Envelope]:
    """The message and its envelope; raises ImageError."""
    m = image.decode(img, max_message + SIZE)
    if len(m.data) < SIZE:
        raise ImageError(f"image of {len(img)} bytes has no routing envelope")
    mark, hops, flags, epoch, pseq = TRAILER.unpack_from(m.data, len(m.data) - SIZE)
    if mark != MARK:
        raise ImageError(f"routing envelope mark {mark!r}, not {MARK!r}")
    data = m.data[:-SIZE]
    if len(data) > max_message:
        raise ImageError(f"message of {len(data)} bytes is over the maximum of {max_message}")
    return Image(m.to_id, m.from_id, m.msg_id, m.user_id, data), Envelope(hops, flags, epoch.hex(), pseq)
