"""The message image both line protocols carry (docs/DESIGN.md section 4), big-endian.

    TO_ID(6) FROM_ID(6) MSG_ID(2) USER_ID(2) LENGTH(2) MESSAGE(LENGTH)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Generic, TypeVar

from .ids import IdError, process_id

HEADER = struct.Struct(">6s6sHHH")
HEADER_SIZE = HEADER.size  # 18


class ImageError(ValueError):
    """Bytes that are not a valid message image."""


Text = TypeVar("Text")


@dataclass(frozen=True)
class Image(Generic[Text]):
    """A message's image; its text is bytes off a line (an MCCS daemon may put a reference to
    where the text is kept in their place: a large message made whole from its segments)."""
    to_id: str
    from_id: str
    msg_id: int
    user_id: int
    data: Text

    @property
    def origin(self) -> str:
        """The originating host: with MSG_ID, the key that finds duplicates."""
        return self.from_id[:2]

    @property
    def key(self) -> tuple[str, int]:
        return (self.origin, self.msg_id)


def encode(to_id: str, from_id: str, msg_id: int, user_id: int, data: bytes,
           max_message: int = 65535) -> bytes:
    """Build the image, checking every field; raises ImageError."""
    try:
        to_id, from_id = process_id(to_id), process_id(from_id)
    except IdError as e:
        raise ImageError(str(e)) from None
    for name, value in (("MSG_ID", msg_id), ("USER_ID", user_id)):
        if not isinstance(value, int) or not 0 <= value <= 0xFFFF:
            raise ImageError(f"{name} {value!r} is not a 16-bit number")
    if len(data) > max_message:
        raise ImageError(f"message of {len(data)} bytes is over the maximum of {max_message}")
    return HEADER.pack(to_id.encode("ascii"), from_id.encode("ascii"), msg_id, user_id, len(data)) + bytes(data)


def decode(image: bytes, max_message: int = 65535) -> Image:
    """Parse and validate an image; raises ImageError."""
    if len(image) < HEADER_SIZE:
        raise ImageError(f"image of {len(image)} bytes is shorter than its {HEADER_SIZE}-byte header")
    to_b, from_b, msg_id, user_id, length = HEADER.unpack_from(image)
    if length != len(image) - HEADER_SIZE:
        raise ImageError(f"LENGTH {length} does not match the {len(image) - HEADER_SIZE} bytes that follow")
    if length > max_message:
        raise ImageError(f"message of {length} bytes is over the maximum of {max_message}")
    try:
        to_id, from_id = process_id(to_b.decode("ascii")), process_id(from_b.decode("ascii"))
    except (UnicodeDecodeError, IdError) as e:
        raise ImageError(f"bad id in image: {e}") from None
    return Image(to_id, from_id, msg_id, user_id, bytes(image[HEADER_SIZE:]))


def key_of(image: bytes | bytearray) -> tuple[str, int]:
    """(origin host, MSG_ID) of an image without a full decode."""
    return image[6:8].decode("ascii", "replace"), int.from_bytes(image[12:14], "big")
