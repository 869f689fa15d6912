"""End-to-end protection (E2E1): a message its origin signs, or seals, for its destination host,
so that a transit host can carry it but neither read it (seal), change it, nor forge one.

Every host has one X25519 key pair (`mccs keys init`); each pair of hosts shares, from their static
keys and without a word on the wire, two keys per direction (HKDF-SHA256 of the X25519 secret):
a MAC key and a cipher key. A protected message carries a 23-byte trailer after its text, flagged
by the routing envelope's mark 'E' instead of 'R' (docs/E2E.md):

    MODE(1) OKEY(1) DKEY(1) TTL0(4) TAG(16)

MODE is 1 (signed) or 2 (sealed); OKEY and DKEY name the origin's and destination's keys (the first
byte of the SHA-256 of each public key), so that a key rotated while messages are on their way still
verifies them; TTL0 is the TTL the message left its origin with; TAG is HMAC-SHA256, cut to 16
bytes, over the fields a transit host could change (TO_ID, FROM_ID, MSG_ID, USER_ID, priority,
the RECEIPT and NOTICE flags, EPOCH, PSEQ, TTL0) and the plain text. A sealed text is encrypted
with ChaCha20 under the cipher key with the TAG as its nonce (SIV: the same message always gives
the same bytes, and no nonce can be reused by mistake, not even by an origin restored from a
backup). A destination takes a message only if its TAG verifies and its TTL is not above TTL0.
A message too long for a frame is sealed as a whole at SEND under an SIV that each of its segments
carries with a tag over its numbers (39 bytes, mark 'L'); its destination checks the text as it
reads it back (TextCheck).

Sans-I/O: keys are handed in (mccs.daemon.keys reads them from their files).
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import struct
from dataclasses import dataclass, field
from enum import StrEnum

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from linedrivers.ids import process_id

from mccs.core import envelope
from mccs.core.envelope import E2E_SIZE

FEATURE = "E2E1"  # offered at sign-on: the peer carries messages with the 'E' mark
TRAILER = struct.Struct(">BBBI16s")
assert TRAILER.size == E2E_SIZE
AD = struct.Struct(">9sB6s6sHHBB4sII")  # "MCCS E2E1" MODE TO FROM MSG_ID USER_ID PRIORITY FLAGS EPOCH PSEQ TTL0
LABEL = b"MCCS E2E1"
COVERED = envelope.RECEIPT | envelope.NOTICE  # the flags a tag covers (a void has no text to verify)
TTL_SLACK_HOPS = 16  # (the hop limit's most) tenths of a second a TTL may grow by rounding on the way


class Mode(StrEnum):
    """How a message arrived, as processes see it (Message.e2e)."""
    NONE = "none"
    SIGNED = "signed"
    SEALED = "sealed"


WIRE_MODE = {Mode.SIGNED: 1, Mode.SEALED: 2}
#: A message in segments (docs/E2E.md, "Messages in segments"): its SIV, then a trailer of these modes.
WIRE_LARGE = {Mode.SIGNED: 3, Mode.SEALED: 4}
LARGE_MODE_OF = {v: k for k, v in WIRE_LARGE.items()}
SIV_SIZE = 16
PENDING_SIZE = 1 + SIV_SIZE  # an origin's own message in segments, stored: MODE then its SIV
assert envelope.LARGE_SIZE == SIV_SIZE + E2E_SIZE
#: Stored flags of a message delivered here with its protection verified (mccs.core.envelope's list).
STORED = {Mode.SIGNED: 0x400, Mode.SEALED: 0x800}
MODE_OF = {v: k for k, v in WIRE_MODE.items()}
#: The [host] e2e setting: what this host does to the messages it originates.
SETTING = {"off": Mode.NONE, "sign": Mode.SIGNED, "seal": Mode.SEALED}


class Refused(ValueError):
    """A protected message that does not verify, or one the destination does not accept: why, for
    people, and a code for counters (`mccs status`: refused_<code>) and the trace."""

    def __init__(self, text: str, code: str = "bad_tag"):
        super().__init__(text)
        self.code = code


def mode_of(flags: int) -> Mode:
    """How a stored message arrived, from its flags."""
    return next((mode for mode, flag in STORED.items() if flags & flag), Mode.NONE)


def key_hint(public: bytes) -> int:
    return hashlib.sha256(public).digest()[0]


def public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes_raw()


@dataclass
class Keyring:
    """This host's key pairs (the current one first, then retired ones still taken) and the public
    keys it trusts per host (the current one first). Pair keys are derived once and kept."""
    host: str
    own: list[X25519PrivateKey] = field(default_factory=list)
    trusted: dict[str, list[bytes]] = field(default_factory=dict)
    _pairs: dict[tuple, tuple[bytes, bytes]] = field(default_factory=dict, repr=False)

    def update(self, other: Keyring) -> None:
        self.own, self.trusted = list(other.own), dict(other.trusted)
        self._pairs.clear()

    def trusts(self, host: str) -> bool:
        return bool(self.trusted.get(host))

    def _keys(self, mine: X25519PrivateKey, theirs: bytes, origin: str, dest: str) -> tuple[bytes, bytes]:
        """(MAC key, cipher key) for messages from `origin` to `dest`, one of which is this host."""
        ours = public_bytes(mine)
        key = (ours, theirs, origin, dest)
        if key not in self._pairs:
            secret = mine.exchange(X25519PublicKey.from_public_bytes(theirs))
            opub, dpub = (ours, theirs) if origin == self.host else (theirs, ours)
            okm = HKDF(hashes.SHA256(), 64, salt=LABEL,
                       info=LABEL + b" " + origin.encode() + b">" + dest.encode() + opub + dpub).derive(secret)
            self._pairs[key] = (okm[:32], okm[32:])
        return self._pairs[key]

    def for_sending(self, dest: str) -> tuple[bytes, bytes, int, int]:
        """The keys for a message to `dest`, and the hints that name them; raises Refused if there are none."""
        if not self.own:
            raise Refused("this host has no key (mccs keys init)", "no_key")
        if not self.trusts(dest):
            raise Refused(f"no trusted key for {dest} (mccs keys trust)", "untrusted")
        mine, theirs = self.own[0], self.trusted[dest][0]
        return (*self._keys(mine, theirs, self.host, dest), key_hint(public_bytes(mine)), key_hint(theirs))

    def for_receiving(self, origin: str, okey: int, dkey: int) -> list[tuple[bytes, bytes]]:
        """The (MAC key, cipher key) pairs a message from `origin` may have been made with, named by its
        hints: one, but where a key's hint is another's too (1 in 256), each to try; raises Refused."""
        theirs = [k for k in self.trusted.get(origin, []) if key_hint(k) == okey]
        if not theirs:
            raise Refused(f"no trusted key for {origin}" if not self.trusts(origin)
                          else f"made with a key of {origin} that is not trusted here", "untrusted")
        mine = [k for k in self.own if key_hint(public_bytes(k)) == dkey]
        if not mine:
            raise Refused("made for a key of this host it no longer has", "old_key")
        return [self._keys(m, t, origin, self.host) for m in mine for t in theirs]


@dataclass(frozen=True)
class Header:
    """What a tag covers besides the text: the fields of the image and envelope a transit host keeps."""
    to_id: str
    from_id: str
    msg_id: int
    user_id: int
    priority: int
    flags: int  # the wire FLAGS without priority
    epoch: str
    pseq: int

    @classmethod
    def of(cls, m, env: envelope.Envelope) -> Header:
        """Of an image or a MSGBLOK, with the envelope it goes (or came) with."""
        return cls(process_id(m.to_id), process_id(m.from_id), m.msg_id, m.user_id, env.priority, env.flags,
                   env.epoch, env.pseq)


def _ad(mode: int, h: Header, ttl0: int) -> bytes:
    return AD.pack(LABEL, mode, h.to_id.encode(), h.from_id.encode(), h.msg_id, h.user_id, h.priority,
                   h.flags & COVERED, bytes.fromhex(h.epoch or envelope.NO_EPOCH), h.pseq, ttl0)


def _tag(mac_key: bytes, mode: int, h: Header, ttl0: int, text: bytes) -> bytes:
    return hmac.new(mac_key, _ad(mode, h, ttl0) + text, hashlib.sha256).digest()[:16]


def _stream(cipher_key: bytes, tag: bytes):
    """ChaCha20 with the tag as its nonce (counter 0), as a stream: the same function seals and opens."""
    return Cipher(algorithms.ChaCha20(cipher_key, b"\0\0\0\0" + tag[:12]), mode=None).encryptor()


def _cipher(cipher_key: bytes, tag: bytes, text: bytes) -> bytes:
    c = _stream(cipher_key, tag)
    return c.update(text) + c.finalize()


def protect(keys: Keyring, mode: Mode, h: Header, ttl0: int, text: bytes) -> tuple[bytes, bytes]:
    """The text as it goes (sealed: encrypted) and its trailer. Raises Refused without keys for it."""
    mac_key, cipher_key, okey, dkey = keys.for_sending(h.to_id[:2])
    wire = WIRE_MODE[mode]
    tag = _tag(mac_key, wire, h, ttl0, text)
    out = _cipher(cipher_key, tag, text) if mode is Mode.SEALED else text
    return out, TRAILER.pack(wire, okey, dkey, ttl0, tag)


def in_segments(seal: bytes) -> bool:
    """Is a stored message protected as one in segments (an origin's MODE and SIV, or a copy's 39 bytes)?"""
    return len(seal) in (PENDING_SIZE, envelope.LARGE_SIZE)


def whole_max(cfg) -> int:
    """The longest message a protected one goes whole (one frame on every line of the host); a
    longer one is sealed as a whole at SEND and goes in segments."""
    from mccs.core.notices import DAEMON_ROOM  # (notices needs this module's HostState first)
    return min([max(cfg.max_message, DAEMON_ROOM)] + [lc.frame_max for lc in cfg.lines])


def _static(h: Header) -> Header:
    """What a message in segments' SIV covers: all but its numbers, which it gets later."""
    return dataclasses.replace(h, epoch=envelope.NO_EPOCH, pseq=0)


def seal_whole_text(keys: Keyring, mode: Mode, h: Header, text: bytes) -> tuple[bytes, bytes]:
    """At SEND, for a message that goes in segments: its text as it is stored and sent (sealed:
    encrypted), and what the origin keeps to protect it later (MODE and the SIV, PENDING_SIZE).
    The SIV is the tag over all but the numbers, and the nonce of its encryption."""
    mac_key, cipher_key, _, _ = keys.for_sending(h.to_id[:2])
    wire = WIRE_LARGE[mode]
    siv = _tag(mac_key, wire, _static(h), 0, text)
    return (_cipher(cipher_key, siv, text) if mode is Mode.SEALED else text), bytes([wire]) + siv


def protect_segments(keys: Keyring, pending: bytes, h: Header, ttl0: int) -> bytes:
    """The trailer every segment of a message in segments carries (LARGE_SIZE): its SIV, then a
    trailer whose tag covers the numbers, TTL0 and the SIV (so the text, through it)."""
    wire, siv = pending[0], pending[1:]
    mac_key, _, okey, dkey = keys.for_sending(h.to_id[:2])
    return siv + TRAILER.pack(wire, okey, dkey, ttl0, _tag(mac_key, wire, h, ttl0, siv))


class TextCheck:
    """The destination's check of a message in segments: its tag over the numbers and SIV first
    (check_segments), then its text, read back piece by piece in order (`update`): opened if
    sealed, and its MAC against the SIV (`ok`). Kept in memory: after a restart it starts again."""

    def __init__(self, mode: Mode, mac_key: bytes, cipher_key: bytes, h: Header, siv: bytes):
        self.mode, self.siv = mode, siv
        self.mac = hmac.new(mac_key, _ad(WIRE_LARGE[mode], _static(h), 0), hashlib.sha256)
        self.opener = _stream(cipher_key, siv) if mode is Mode.SEALED else None
        self.cipher_key = cipher_key
        self.done = 0  # bytes checked

    def update(self, piece: bytes) -> None:
        self.mac.update(self.opener.update(piece) if self.opener is not None else piece)
        self.done += len(piece)

    def ok(self) -> bool:
        return hmac.compare_digest(self.mac.digest()[:SIV_SIZE], self.siv)


def check_segments(keys: Keyring, h: Header, ttl: int | None, trailer: bytes, hops: int = 1) -> TextCheck:
    """The first check of a message in segments for this host; raises Refused. `ttl` None: checked
    before (a restart)."""
    siv = trailer[:SIV_SIZE]
    wire, okey, dkey, ttl0, tag = TRAILER.unpack(trailer[SIV_SIZE:])
    mode = LARGE_MODE_OF.get(wire)
    if mode is None:
        raise Refused(f"unknown protection mode {wire} for a message in segments", "mode")
    mac_key, cipher_key = _made_with(keys, h, wire, ttl0, siv, tag, okey, dkey)
    _check_ttl(ttl0, ttl, hops)
    return TextCheck(mode, mac_key, cipher_key, h, siv)


def _made_with(keys: Keyring, h: Header, wire: int, ttl0: int, siv: bytes, tag: bytes, okey: int,
               dkey: int) -> tuple[bytes, bytes]:
    """The keys whose tag over the numbers and the SIV of a message in segments is TAG; raises Refused."""
    for mac_key, cipher_key in keys.for_receiving(h.from_id[:2], okey, dkey):
        if hmac.compare_digest(_tag(mac_key, wire, h, ttl0, siv), tag):
            return mac_key, cipher_key
    raise Refused("its tag does not verify: changed on the way, or forged")


def opening(keys: Keyring, h: Header, trailer: bytes) -> tuple[bytes, bytes] | None:
    """A sealed message in segments is kept encrypted at its destination: the key and SIV that
    open its text as the shell hands it to a process (`opener`); None if it is not sealed (or its
    keys are gone: it is handed as it is)."""
    if len(trailer) != envelope.LARGE_SIZE:
        return None
    siv = trailer[:SIV_SIZE]
    wire, okey, dkey, ttl0, tag = TRAILER.unpack(trailer[SIV_SIZE:])
    if LARGE_MODE_OF.get(wire) is not Mode.SEALED:
        return None
    try:
        return _made_with(keys, h, wire, ttl0, siv, tag, okey, dkey)[1], siv
    except Refused:
        return None


def opener(opening: tuple[bytes, bytes]):
    """The stream that opens such a text from its first byte on (`update` piece after piece)."""
    return _stream(*opening)


def _check_ttl(ttl0: int, ttl: int | None, hops: int) -> None:
    if ttl is not None and ttl0 and (ttl == 0 or ttl > ttl0 + min(max(hops, 1), TTL_SLACK_HOPS)):
        raise Refused(f"its ttl was raised on the way ({ttl0 / 10:.1f} s at its origin, {ttl / 10:.1f} s here)",
                      "ttl_raised")


def open_(keys: Keyring, h: Header, ttl: int, text: bytes, trailer: bytes, hops: int = 1) -> tuple[bytes, Mode]:
    """The plain text of a protected message for this host, and how it came; raises Refused. Each
    host on the way rounds the time left up to a tenth of a second: `hops` tenths are let pass."""
    wire, okey, dkey, ttl0, tag = TRAILER.unpack(trailer)
    mode = MODE_OF.get(wire)
    if mode is None:
        raise Refused(f"unknown protection mode {wire}", "mode")
    for mac_key, cipher_key in keys.for_receiving(h.from_id[:2], okey, dkey):
        plain = _cipher(cipher_key, tag, text) if mode is Mode.SEALED else text
        if hmac.compare_digest(_tag(mac_key, wire, h, ttl0, plain), tag):
            break
    else:
        raise Refused("its tag does not verify: changed on the way, or forged")
    _check_ttl(ttl0, ttl, hops)
    return plain, mode
