"""Framing of the process socket: a 4-byte big-endian length, then one JSON object.

Message data travels base64-encoded in the field `data`, or, for a large message, as it is
right after the JSON: the object then says `"bin": n` (n bytes follow, not counted in the
length). A client that says `"binary": true` in its hello gets large messages that way. Every
request may carry an `id` that its reply echoes, so the client can tell a late reply from the
one it waits for.

A connection may switch to MessagePack (`{"op": "codec", "name": "msgpack"}`, when the daemon
offers it in its hello reply): from the reply on, every frame's body is a MessagePack map in
both directions, and a request's `data` may be bytes as they are.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import struct

try:
    import msgpack
except ImportError:  # JSON only
    msgpack = None

LENGTH = struct.Struct(">I")
_JSON = json.JSONEncoder(separators=(",", ":"))


class FrameError(ValueError):
    """A request that cannot be read: the connection gets an error reply."""


def frame(obj: dict, codec: str = "json") -> bytes:
    body = msgpack.packb(obj) if codec == "msgpack" else _JSON.encode(obj).encode()
    return LENGTH.pack(len(body)) + body


INT_BOUND = 1 << 63


def _int(text: str) -> int:
    """A JSON integer, within 64 bits as MessagePack's and SQLite's are (JSON has no bound)."""
    value = int(text)
    if not -INT_BOUND <= value < INT_BOUND:
        raise ValueError(f"the integer {text[:24]}{'...' * (len(text) > 24)} is beyond 64 bits")
    return value


_DECODER = json.JSONDecoder(parse_int=_int)
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # an escape of half a UTF-16 pair


def unframe(body: bytes, codec: str = "json"):
    """A frame's body as an object; ValueError (or RecursionError) if it is not one. Strings
    are text that UTF-8 can carry (JSON can escape half a surrogate pair, which no file, database
    or MessagePack reply takes), integers within 64 bits."""
    if codec != "msgpack":
        obj = _DECODER.decode(body.decode())
        if _SURROGATE.search(body):  # rare: a pair (an emoji, say) is fine, half of one is not
            try:
                json.dumps(obj, ensure_ascii=False).encode()
            except UnicodeEncodeError:
                raise ValueError("a string holds half of a UTF-16 surrogate pair") from None
        return obj
    try:
        return msgpack.unpackb(body)
    except RecursionError:
        raise
    except Exception as e:  # msgpack's errors have no common base but Exception
        raise ValueError(f"not MessagePack: {e}") from None


class Deframer:
    """Splits a byte stream into JSON objects; a frame over `limit` bytes is an error (then close).
    An object with `"bin": n` gets the n bytes after it in `bin` (at most `bin_limit`)."""

    def __init__(self, limit: int, bin_limit: int = 0):
        self.limit, self.bin_limit = limit, bin_limit
        self.codec = "json"  # switched by the connection when its client asks (op codec)
        self._buf = bytearray()
        self._pending: dict | None = None  # an object whose attachment is still coming
        self._att = bytearray()
        self._got = 0

    def feed(self, data: bytes) -> list[dict | FrameError]:
        out: list[dict | FrameError] = []
        if self._pending is not None:
            data = self._attach(data, out)
        self._buf += data
        while self._pending is None and len(self._buf) >= 4:
            (n,) = LENGTH.unpack_from(self._buf)
            if n > self.limit:
                raise FrameError(f"request of {n} bytes is over the limit of {self.limit}")
            if len(self._buf) < 4 + n:
                break
            body = bytes(self._buf[4:4 + n])
            del self._buf[:4 + n]
            try:
                obj = unframe(body, self.codec)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as e:
                out.append(FrameError(f"malformed request: {e}"))
            except RecursionError:
                out.append(FrameError("malformed request: nested too deeply"))
            else:
                if "bin" in obj:
                    self._start(obj)
                    rest, self._buf = bytes(self._buf), bytearray()
                    self._buf += self._attach(rest, out)
                else:
                    out.append(obj)
        return out

    def _start(self, obj: dict) -> None:
        n = obj["bin"]
        if type(n) is not int or not 0 <= n <= self.bin_limit:
            raise FrameError(f"attachment of {n!r} bytes: not a size up to {self.bin_limit}")
        self._pending, self._att, self._got = obj, bytearray(n), 0  # filled in place: no copy, no growth

    def _attach(self, data: bytes, out: list) -> bytes:
        """Take the pending attachment's bytes from `data`; return what follows it."""
        assert self._pending is not None  # called only while an attachment is coming (_start)
        need = len(self._att) - self._got
        piece = memoryview(data)[:need]
        self._att[self._got:self._got + len(piece)] = piece
        self._got += len(piece)
        if self._got == len(self._att):
            self._pending["bin"] = self._att
            out.append(self._pending)
            self._pending, self._att = None, bytearray()
        return data[need:]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text) -> bytes:
    if not isinstance(text, str):
        raise FrameError("data must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise FrameError(f"data is not valid base64: {e}") from None
