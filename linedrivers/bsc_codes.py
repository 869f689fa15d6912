"""BSC code sets and the byte sequences built from them (docs/DESIGN.md section 4.2).

Every sequence a station sends is complete on its own: `SYN SYN`, the control characters, and
the trailing pad `FF` that lets the last character clear the modem before the line turns round.
On a line with a secret (docs/PROTOCOL.md) a control sequence also carries an authentication
trailer with its own CRC-16, a block carries it at the end of its text, and the IDs say so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .crc import crc16, le16

PAD = 0xFF
#: The longest feature announcement text the reader accepts.
MAX_ANNOUNCEMENT = 96
#: The longest station ID the reader accepts before an ENQ / ACK0 / NAK (IBM allows 2-15).
MAX_ID = 15
#: On a line with a secret: the longest ID (an ID ACK0 with a nonce and its check).
AUTH_MAX_ID = 48
#: After the host id in the ID of a station that authenticates (7 characters in all, so a station
#: without authentication reads a stranger's ID and answers ID NAK instead of hanging).
AUTH_MARK = "+"


@dataclass(frozen=True)
class CodeSet:
    """The control characters of one code set; `ack0` ... `rvi` are the characters after DLE."""
    name: str
    codec: str        # how IDs are encoded
    ctl_max: int      # the highest control character: anything above it may be part of an ID
    syn: int
    stx: int
    etb: int
    etx: int
    eot: int
    enq: int
    nak: int
    dle: int
    ack0: int
    ack1: int
    wack: int
    rvi: int
    soh: int          # starts a feature announcement (bsc_agree), which a version-1 reader drops
    #: kind -> the characters between `SYN SYN` and the pad, for every fixed sequence.
    bodies: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "bodies", {
            "ENQ": bytes([self.enq]), "EOT": bytes([self.eot]), "NAK": bytes([self.nak]),
            "ACK0": bytes([self.dle, self.ack0]), "ACK1": bytes([self.dle, self.ack1]),
            "WACK": bytes([self.dle, self.wack]), "RVI": bytes([self.dle, self.rvi]),
            "TTD": bytes([self.stx, self.enq]), "DISC": bytes([self.dle, self.eot]),
        })

    def sequence(self, kind: str, ident: bytes = b"", trailer: bytes = b"") -> bytes:
        """`SYN SYN [ID] body FF`: the line bid, a reply, EOT, TTD, DLE EOT; with an ID the
        identification forms (ID ENQ, ID ACK0, ID NAK). An authentication trailer goes after
        the body with a CRC-16 of body and trailer, low byte first (controls have no BCC)."""
        body = self.bodies[kind]
        if trailer:
            body += trailer + le16(crc16(body + trailer))
        return bytes([self.syn, self.syn]) + ident + body + bytes([PAD])

    def announcement(self, data: bytes) -> bytes:
        """`SYN SYN SOH text ETX BCC FF`: a feature announcement (bsc_agree), its text in the line's
        code. The BCC is a block's, over the text and ETX. A version-1 reader meets SOH where no
        sequence starts with it, counts a bad sequence and hunts for the next `SYN SYN`; the text
        has none."""
        head, end = bytes([self.syn, self.syn, self.soh]), bytes([self.etx])
        return head + data + end + le16(crc16(end, crc16(data))) + bytes([PAD])

    def encode_id(self, host: str, auth: bool = False, nonce: bytes = b"") -> bytes:
        """A station's ID: `MCCS` and its host id, in the line's code. A station that
        authenticates adds AUTH_MARK, and in its ID ACK0 its nonce in hex and a CRC-16 of the ID
        so far in 4 hex digits (an ID has no BCC, and a nonce hit on the line must not pass)."""
        ident = ("MCCS" + host + (AUTH_MARK + nonce.hex().upper() if auth else "")).encode(self.codec)
        return ident + f"{crc16(ident):04X}".encode(self.codec) if nonce else ident

    def decode_id(self, ident: bytes) -> str:
        """The host id in a received ID (the whole ID as text when it is not an MCCS one)."""
        text = ident.decode(self.codec, "replace")
        return text[4:] if text.startswith("MCCS") else text

    def parse_id(self, ident: bytes) -> tuple[str, bool, bytes]:
        """(host id, whether the station authenticates, its nonce) of a received ID; the nonce
        is b"" when there is none or its check fails."""
        host, mark, rest = self.decode_id(ident).partition(AUTH_MARK)
        if not mark:
            return host, False, b""
        try:
            nonce = bytes.fromhex(rest[:-4])
            good = len(rest) > 4 and rest[-4:].isalnum() and int(rest[-4:], 16) == crc16(ident[:-4])
        except ValueError:
            good = False
        return host, True, nonce if good else b""

    def texts(self, image: bytes, block_size: int) -> list[tuple[bytes, bool]]:
        """The texts of one message's blocks and whether each is the last: up to `block_size`
        bytes each (block_size >= 2), and never two equal ETB blocks running, so that a
        receiver can tell a block sent again from the next one."""
        out: list[tuple[bytes, bool]] = []
        start, prev = 0, None
        while not out or start < len(image):
            text = image[start:start + block_size]
            if text == prev and start + block_size < len(image):
                text = text[:-1]  # two equal ETB blocks running would read as one sent twice
            start += len(text)
            out.append((text, start >= len(image)))
            prev = text
        return out

    def block(self, text: bytes, last: bool) -> bytes:
        """One transparent block, `SYN SYN DLE STX text DLE ETB|ETX BCC FF`, every DLE in the text
        doubled; BCC = CRC-16 over the text and the ending, low byte first."""
        end = self.etx if last else self.etb
        bcc = crc16(bytes([end]), crc16(text))
        head = bytes([self.syn, self.syn, self.dle, self.stx])
        tail = bytes([self.dle, end]) + le16(bcc) + bytes([PAD])
        return head + text.replace(bytes([self.dle]), bytes([self.dle, self.dle])) + tail

    def blocks(self, image: bytes, block_size: int) -> list[bytes]:
        """The transparent text blocks of one message (texts() and block())."""
        return [self.block(text, last) for text, last in self.texts(image, block_size)]


EBCDIC = CodeSet("ebcdic", "cp037", 0x3F, syn=0x32, stx=0x02, etb=0x26, etx=0x03, eot=0x37,
                 enq=0x2D, nak=0x3D, dle=0x10, ack0=0x70, ack1=0x61, wack=0x6B, rvi=0x7C, soh=0x01)
ASCII = CodeSet("ascii", "ascii", 0x1F, syn=0x16, stx=0x02, etb=0x17, etx=0x03, eot=0x04,
                enq=0x05, nak=0x15, dle=0x10, ack0=0x30, ack1=0x31, wack=0x3B, rvi=0x3C, soh=0x01)
CODE_SETS = {"ebcdic": EBCDIC, "ascii": ASCII}
