"""Framing of the process socket: a 4-byte big-endian length, then one JSON object.

Message data travels base64-encoded in the field `data`. Every request may carry an `id`
that its reply echoes, so the client can tell a late reply from the one it waits for.
"""
from __future__ import annotations

import base64
import binascii
import json
import struct

LENGTH = struct.Struct(">I")


class FrameError(ValueError):
    """A request that cannot be read: the connection gets an error reply."""


def frame(obj: dict) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return LENGTH.pack(len(body)) + body


class Deframer:
    """Splits a byte stream into JSON objects; a frame over `limit` bytes is an error (then close)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict | FrameError]:
        self._buf += data
        out: list[dict | FrameError] = []
        while len(self._buf) >= 4:
            (n,) = LENGTH.unpack_from(self._buf)
            if n > self.limit:
                raise FrameError(f"request of {n} bytes is over the limit of {self.limit}")
            if len(self._buf) < 4 + n:
                break
            body = bytes(self._buf[4:4 + n])
            del self._buf[:4 + n]
            try:
                obj = json.loads(body)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                out.append(obj)
            except (ValueError, UnicodeDecodeError) as e:
                out.append(FrameError(f"malformed request: {e}"))
            except RecursionError:
                out.append(FrameError("malformed request: nested too deeply"))
        return out


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text) -> bytes:
    if not isinstance(text, str):
        raise FrameError("data must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise FrameError(f"data is not valid base64: {e}") from None
