"""The async protocol's wire (docs/DESIGN.md 4.1): frames, byte stuffing, the sign-on body, and
the Deframer that cuts the received byte stream into checked frames.

A frame is `7E | KIND | SEQ | ACK | body | FCS | 7E`, byte-stuffed, FCS = CRC-16/X-25 over KIND..body,
low byte first; with FEAT=FCS32 agreed, a frame whose body is longer than LONG_BODY carries a CRC-32
instead (docs/PROTOCOL.md); with FEAT=FEC agreed, a long D frame may go as an F frame, the same
content with Reed-Solomon parity (async_fec.py). On a line with a secret the body of D A N B P O ends with an
authentication trailer (auth.py, docs/PROTOCOL.md); to this module it is part of the body.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from . import async_fec
from .auth import NONCE_SIZE
from .crc import crc32, le16, x25
from .ids import IdError, check_epoch, check_host_id
from .image import HEADER_SIZE

FLAG, ESC = 0x7E, 0x7D
KINDS = frozenset(b"DANBRSTOPV")
D = ord("D")
#: Where the image header keeps LENGTH (linedrivers/image.py: TO_ID FROM_ID MSG_ID USER_ID LENGTH).
LENGTH_AT = 16
#: With a secret, these carry a MAC trailer once the line is UP (S T V carry the sign-on proofs).
SEALED = frozenset("DANBRPO")
#: The sign-on feature of selective repeat: R (SEQ = a frame the receiver lacks) asks for that
#: frame alone, and the receiver keeps what came after the gap (docs/PROTOCOL.md).
SREJ = "SREJ"
#: The sign-on feature of CRC-32 for long frames: CRC-16 misses too much damage in a few kilobytes.
FCS32 = "FCS32"
#: The sign-on feature of forward error correction: long D frames may go as F frames (async_fec.py),
#: and A and B carry how many bytes the receiver mended, so the sender knows the line's damage.
FEC = "FEC"
#: The sign-on feature of frame abort: ESC FLAG ends a frame unfinished (as in HDLC), and the receiver
#: drops it without taking it for damage, so that a message of higher priority cuts in (docs/PROTOCOL.md).
ABORT = "ABORT"
#: What cuts a frame short: a lone ESC never ends a frame otherwise (stuffing pairs every ESC).
ABORT_BYTES = b"\x7d\x7e"
#: With FCS32 agreed, a body (after KIND SEQ ACK, trailer included) longer than this gets CRC-32.
LONG_BODY = 256
#: Bytes escaped as ESC, byte ^ 0x20. ESC must come first so its own escapes are not re-escaped.
STUFFED = (0x7D, 0x7E)
XONXOFF_STUFFED = STUFFED + (0x11, 0x13, 0x91, 0x93)
#: Flags (2) + KIND SEQ ACK (3) + FCS (2): the bytes a frame adds to its body, unstuffed.
OVERHEAD = 7
#: What a CRC-32 adds to that.
FCS32_EXTRA = 2
VERSION = "MCCS/1"
#: The body of the O that refuses a sign-on (a plain sign-off has none); toward a peer that
#: authenticates, a space and why follow (the refused end's LineDown shows them).
REFUSED = b"REFUSED"


def stuff(data: bytes, special: tuple[int, ...] = STUFFED) -> bytes:
    """Escape every special byte as ESC, byte ^ 0x20 (one bytes.replace per special byte)."""
    for b in special:
        if b in data:
            data = data.replace(bytes((b,)), bytes((ESC, b ^ 0x20)))
    return data


def unstuff(data: bytes) -> bytes | None:
    """Undo stuff(); None for an ESC with nothing (or another ESC) after it."""
    if ESC not in data:
        return data
    parts = data.split(b"\x7d")
    out = [parts[0]]
    for p in parts[1:]:
        if not p:
            return None
        out.append(bytes((p[0] ^ 0x20,)))
        out.append(p[1:])
    return b"".join(out)


def encode_frame(kind: str, seq: int = 0, ack: int = 0, body: bytes = b"",
                 special: tuple[int, ...] = STUFFED, fcs32: bool = False, fec: bool = False) -> bytes:
    """One complete frame with flags, FCS and stuffing; `fcs32`: FCS32 was agreed; `fec`: a D frame
    goes as an F frame (FEC agreed), always with a CRC-32."""
    if fec:
        content = bytes((async_fec.KIND, seq, ack)) + body
        return b"\x7e" + stuff(async_fec.protect(content + crc32(content).to_bytes(4, "little")), special) + b"\x7e"
    content = bytes((ord(kind), seq, ack)) + body
    fcs = crc32(content).to_bytes(4, "little") if fcs32 and len(body) > LONG_BODY else le16(x25(content))
    return b"\x7e" + stuff(content + fcs, special) + b"\x7e"


def fcs_size(content_len: int, fcs32: bool) -> int:
    """The FCS bytes at the end of `content_len` unstuffed bytes (KIND..FCS): what the sender chose by
    the body's length, so 4 for a long frame when FCS32 was agreed, else 2; 0 for a length that
    neither choice makes (3 + LONG_BODY + 2 < content_len <= 3 + LONG_BODY + 4): a damaged frame."""
    if fcs32 and content_len > 3 + LONG_BODY + 4:
        return 4
    return 2 if not fcs32 or content_len <= 3 + LONG_BODY + 2 else 0


@dataclass(frozen=True)
class SignOn:
    """The values a sign-on (S), its reply (T) or, with a secret, the proof (V) carries. SESSION
    (a field added to the DESIGN's three) names one sign-on: T echoes the S it answers, so a late
    or repeated S or T is told apart from a new one and both ends reset their sequence state once.
    AUTH (a nonce) and PROOF, hex, only with a secret (docs/PROTOCOL.md)."""
    host: str
    window: int
    maxmsg: int
    session: str = ""
    nonce: bytes = b""
    proof: bytes = b""
    features: tuple[str, ...] = ()  # FEAT=A,B: what this end can do beyond docs/DESIGN.md (docs/ROUTING.md)
    large: int = 0  # LARGE=n: the largest message this end takes cut in segments (docs/PROTOCOL.md)
    epoch: str = ""  # EPOCH=hex: this end's checkpoint epoch, new when it was started afresh (docs/PROTOCOL.md)

    def encode(self) -> bytes:
        text = f"{VERSION} HOST={self.host} WINDOW={self.window} MAXMSG={self.maxmsg}"
        text += f" SESSION={self.session}" if self.session else ""
        text += f" AUTH={self.nonce.hex()}" if self.nonce else ""
        text += f" PROOF={self.proof.hex()}" if self.proof else ""
        text += f" FEAT={','.join(self.features)}" if self.features else ""
        text += f" LARGE={self.large}" if self.large else ""
        text += f" EPOCH={self.epoch}" if self.epoch else ""
        return text.encode("ascii")

    @classmethod
    def parse(cls, body: bytes) -> "SignOn | None":
        """The sign-on in `body`, or None when it is not a valid one (unknown fields are ignored)."""
        try:
            version, *tokens = body.decode("ascii").split(" ")
            fields = dict(t.split("=", 1) for t in tokens if "=" in t)
            signon = cls(check_host_id(fields["HOST"]), int(fields["WINDOW"]), int(fields["MAXMSG"]),
                         fields.get("SESSION", ""), bytes.fromhex(fields.get("AUTH", "")),
                         bytes.fromhex(fields.get("PROOF", "")),
                         tuple(f for f in fields.get("FEAT", "").split(",") if f), int(fields.get("LARGE", 0)),
                         check_epoch(fields.get("EPOCH", "")))
        except (UnicodeDecodeError, KeyError, ValueError, IdError):
            return None
        ok = version == VERSION and 1 <= signon.window <= 127 and 0 <= signon.maxmsg <= 65535 and signon.large >= 0
        return signon if ok and len(signon.nonce) in (0, NONCE_SIZE) else None


class RxFrame(NamedTuple):
    """One flag-delimited chunk as received: `content` is KIND SEQ ACK body (FCS checked and
    taken off), or None for a chunk dropped and counted (traced as `kind`, "?" when unknown,
    "ABORT" when its sender cut it short). An F frame comes as the D frame it carries, with the
    bytes its parity `mended`."""
    kind: str
    nbytes: int  # on the wire, flags included
    content: bytes | None
    mended: int = 0


class Deframer:
    """Hunts for flags, unstuffs and checks frames; never raises. Bad input is counted in
    `counters` (the machine's dict): garbage, oversized, crc_errors, bad_frames, aborts_rx. `fcs32`
    is set by the machine while FCS32 is agreed, `fec` while FEC is, `abort` while ABORT is."""

    def __init__(self, max_raw: int, counters: dict):
        self.max_raw, self.counters = max_raw, counters
        self.fcs32 = self.fec = self.abort = False
        self._rx = bytearray()  # bytes after the last flag
        self._hunting = True    # no flag seen since the last overrun (or ever)
        self._need: int | None = None  # content bytes of the D frame arriving, once its header is in

    @property
    def pending(self) -> int:
        """Bytes of a frame still arriving (or of noise): how long a frame the peer may be sending."""
        return len(self._rx)

    def wanted(self) -> int:
        """At least how many more bytes the frame now arriving needs before it ends (1 when that is
        not known): a D frame's image header gives its LENGTH, and stuffing, a trailer or a
        CRC-32 only add bytes. A port may wait for them instead of reading every few bytes."""
        if self._need is None:
            if self._hunting or len(self._rx) < 3 + HEADER_SIZE or self._rx[0] != D:
                return 1
            content = unstuff(bytes(self._rx).rstrip(b"\x7d"))  # an ESC at the end waits for its pair
            if content is None or len(content) < 3 + HEADER_SIZE:
                return 1
            self._need = 3 + HEADER_SIZE + int.from_bytes(content[3 + LENGTH_AT:3 + HEADER_SIZE], "big") + 2
        return max(1, self._need + 1 - len(self._rx))  # + the closing flag; raw bytes >= content bytes

    def feed(self, data: bytes) -> Iterator[RxFrame]:
        """Take received bytes; return the frames they complete, oldest first. Each is checked as it
        is taken, so a sign-on acted on decides the FCS of the frames behind it in the same bytes."""
        if FLAG not in data:
            self._rx += data
            self._check_overrun()
            return iter(())
        parts = (bytes(self._rx) + data).split(b"\x7e")
        self._rx = bytearray(parts.pop())
        self._need = None
        if self._hunting:
            self.counters["garbage"] += len(parts.pop(0))  # bytes before the first flag
        self._hunting = False
        self._check_overrun()
        return (self._check(raw) for raw in parts if raw)

    def _check_overrun(self) -> None:
        """More bytes than any frame may have and no flag: drop them and hunt for a flag."""
        if len(self._rx) > self.max_raw:
            self.counters["garbage"] += len(self._rx)
            self._rx.clear()
            self._need = None
            self._hunting = True

    def _check(self, raw: bytes) -> RxFrame:
        nbytes = len(raw) + 2
        if len(raw) > self.max_raw:
            self.counters["oversized"] += 1
            return RxFrame("?", nbytes, None)
        if self.abort and raw[-1] == ESC:  # cut short by the sender (ABORT_BYTES): not damage
            self.counters["aborts_rx"] += 1
            return RxFrame("ABORT", nbytes, None)
        content = unstuff(raw)
        if content is None or len(content) < 5:  # a fragment (noise made or hid a flag)
            self.counters["garbage"] += len(raw)
            return RxFrame("?", nbytes, None)
        if self.fec and content[0] == async_fec.KIND:
            return self._mend(content, nbytes)
        n = fcs_size(len(content), self.fcs32)
        check = crc32 if n == 4 else x25
        if not n or check(content[:-n]) != int.from_bytes(content[-n:], "little"):
            self.counters["crc_errors"] += 1
            return RxFrame(chr(content[0]) if content[0] in KINDS else "?", nbytes, None)
        if content[0] not in KINDS:
            self.counters["bad_frames"] += 1
            return RxFrame("?", nbytes, None)
        return RxFrame(chr(content[0]), nbytes, content[:-n])

    def _mend(self, coded: bytes, nbytes: int) -> RxFrame:
        """An F frame: the D frame it carries, mended by its parity if need be."""
        found = async_fec.recover(coded, lambda c: crc32(c[:-4]) == int.from_bytes(c[-4:], "little"))
        if found is None:
            self.counters["crc_errors"] += 1
            return RxFrame("D", nbytes, None)
        content, mended = found
        self.counters["fec_mended"] += mended
        return RxFrame("D", nbytes, b"D" + content[1:-4], mended)
