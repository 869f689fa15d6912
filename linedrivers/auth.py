"""Line authentication primitives shared by both protocols (docs/PROTOCOL.md, "Line authentication").

With a shared secret, a sign-on is a mutual challenge-response: each side contributes a fresh
random nonce, and each proves it knows the secret with an HMAC-SHA256 over both nonces, both
host ids, a SHA-256 of every sign-on body exchanged so far (async: S, T, then V, so no field of
them can be changed on the line: a relay rewriting EPOCH= would make both ends forget what they
kept of each other) and a label naming the prover. The verifier's own fresh nonce is in every
proof it checks, so a recorded sign-on never passes again, and the label keeps one side's proof
from being reflected back as the other's.

From the secret and both nonces, HKDF (RFC 5869, HMAC-SHA256) derives one key per direction.
Every frame after the sign-on carries a trailer of `TRAILER_SIZE` bytes: the low 16 bits of
the sender's frame counter (+1 per frame sent, retransmissions included, from 1 in each
session), then 8 bytes of HMAC-SHA256 over the full 64-bit counter and the frame's contents.
The receiver extends the 16 bits to the smallest counter above the last one it accepted and
checks the MAC: a forged frame fails, and a replayed one fails too, since its counter is not
above the last accepted one any more. No encryption: frames stay readable on the line.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace

NONCE_SIZE = 16
PROOF_SIZE = 16   # a sign-on proof: HMAC-SHA256 truncated to 128 bits
TAG_SIZE = 8      # a frame's MAC: HMAC-SHA256 truncated to 64 bits
COUNTER_SIZE = 2  # the low bits of the frame counter that go on the line
TRAILER_SIZE = COUNTER_SIZE + TAG_SIZE
#: The trailer of a sequence sent before any session key exists (a BSC refusal or NAK in sign-on).
UNSIGNED = bytes(TRAILER_SIZE)
INITIATOR, RESPONDER = "initiator", "responder"
#: Why a sign-on whose proof failed is refused (PeerRefused.reason), in both protocols.
AUTH_FAILED = "failed authentication (a different secret, a replayed sign-on, or one altered on the line)"
_KEY_LABEL = b"MCCS line auth 1 frames "


def new_nonce(random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> bytes:
    """A fresh nonce from the machine's random source (secrets in the daemon, seeded in tests)."""
    return random_bytes(NONCE_SIZE)


def hkdf(secret: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869 HKDF with HMAC-SHA256 (the stdlib has no HKDF)."""
    prk = hmac.digest(salt, secret, "sha256")
    out, block, i = b"", b"", 0
    while len(out) < length:
        i += 1
        block = hmac.digest(prk, block + info + bytes((i,)), "sha256")
        out += block
    return out[:length]


@dataclass(frozen=True)
class Handshake:
    """One authenticated sign-on as both ends see it. The initiator is the side whose sign-on
    (S, or BSC's ID ENQ) was answered; a nonce not known yet is b"". `bodies`: the sign-on
    bodies the proofs cover, in the order they were sent (BSC: none, its commit block binds the
    announcements)."""
    secret: bytes = field(repr=False)
    initiator: str
    responder: str
    initiator_nonce: bytes = b""
    responder_nonce: bytes = b""
    bodies: tuple[bytes, ...] = ()

    def _transcript(self) -> bytes:
        return (self.initiator_nonce + self.responder_nonce
                + self.initiator.encode("ascii") + self.responder.encode("ascii")
                + b"".join(hashlib.sha256(body).digest() for body in self.bodies))

    def proof(self, role: str) -> bytes:
        """What `role` (INITIATOR or RESPONDER) sends to prove it knows the secret. Covering bodies
        (async) it is version 2, which a version-1 peer refuses as a bad proof rather than hang;
        covering none (BSC) it is version 1 as before, so BSC stations from before still sign on."""
        label = b"MCCS line auth 2 proof " if self.bodies else b"MCCS line auth 1 proof "
        msg = label + role.encode("ascii") + b" " + self._transcript()
        return hmac.digest(self.secret, msg, "sha256")[:PROOF_SIZE]

    def verify(self, role: str, proof: bytes) -> bool:
        return len(self.initiator_nonce) == len(self.responder_nonce) == NONCE_SIZE and \
            hmac.compare_digest(self.proof(role), proof)

    def with_nonce(self, initiator_nonce: bytes) -> "Handshake":
        return replace(self, initiator_nonce=initiator_nonce)

    def covering(self, *bodies: bytes) -> "Handshake":
        """The same handshake, its proofs covering `bodies` too (sent after those covered so far)."""
        return replace(self, bodies=self.bodies + bodies)

    def frames(self, local: str) -> "FrameAuth":
        """The frame keys of this session for the end `local`."""
        salt = self.initiator_nonce + self.responder_nonce
        peer = self.responder if local == self.initiator else self.initiator

        def key(sender: str, receiver: str) -> bytes:
            return hkdf(self.secret, salt, _KEY_LABEL + f"{sender}>{receiver}".encode("ascii"))
        return FrameAuth(key(local, peer), key(peer, local))


def _tag(key: bytes, counter: int, content: bytes) -> bytes:
    return hmac.digest(key, counter.to_bytes(8, "big") + content, "sha256")[:TAG_SIZE]


@dataclass
class FrameAuth:
    """The per-direction frame counters and MACs of one session."""
    tx_key: bytes = field(repr=False)
    rx_key: bytes = field(repr=False)
    tx_count: int = 0  # the counter of the last frame sealed
    rx_count: int = 0  # the highest counter accepted

    def seal(self, content: bytes) -> bytes:
        """The trailer for a frame about to go out (every transmission gets a new counter)."""
        self.tx_count += 1
        return (self.tx_count & 0xFFFF).to_bytes(COUNTER_SIZE, "big") + _tag(self.tx_key, self.tx_count, content)

    def check(self, content: bytes, trailer: bytes) -> bool:
        """True if `trailer` authenticates `content` with a counter above every one accepted so
        far; only then is the counter taken as the new highest."""
        if len(trailer) != TRAILER_SIZE:
            return False
        low = int.from_bytes(trailer[:COUNTER_SIZE], "big")
        counter = self.rx_count + 1 + ((low - self.rx_count - 1) & 0xFFFF)
        if not hmac.compare_digest(_tag(self.rx_key, counter, content), trailer[COUNTER_SIZE:]):
            return False
        self.rx_count = counter
        return True
