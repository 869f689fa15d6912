"""The async line protocol (DESIGN.md 4.1) as a sans-I/O state machine.

Frames are `7E | KIND | SEQ | ACK | body | FCS | 7E`, byte-stuffed, FCS = CRC-16/X-25 low byte
first. A go-back-N sliding window with cumulative ACKs (piggybacked in D), reject (N), busy (B)
with polling, keep-alive (P), sign-on (S/T) and sign-off (O). The owner feeds bytes and time in
and takes bytes, events and the next deadline out; nothing here blocks, sleeps or reads a clock.

Control frames (A, N, B) and data frames are built when the owner asks for bytes
(data_to_send), so they always carry the newest acknowledgement the owner has confirmed.

With a `secret` the sign-on is S (AUTH=nonce) -> T (AUTH=nonce PROOF=...) -> V (PROOF=...), the
answering end going UP only on a good V, and every D A N B P O of the session carries a trailer
(counter and MAC, see auth.py) inside the FCS; docs/PROTOCOL.md has the layouts.
"""
from __future__ import annotations

import logging
import secrets
from collections import deque
from dataclasses import dataclass

from .auth import INITIATOR, NONCE_SIZE, RESPONDER, TRAILER_SIZE, FrameAuth, Handshake, new_nonce
from .crc import le16, x25
from .events import (FrameTraced, LineDown, LineEvent, LineUp, MessageAcked, MessageReceived,
                     PeerRefused)
from .ids import IdError, check_host_id
from .image import HEADER_SIZE, ImageError, decode, key_of

log = logging.getLogger(__name__)

FLAG, ESC = 0x7E, 0x7D
KINDS = frozenset(b"DANBSTOPV")
#: With a secret, these carry a MAC trailer once the line is UP (S T V carry the sign-on proofs).
SEALED = frozenset("DANBPO")
#: Bytes escaped as ESC, byte ^ 0x20. ESC must come first so its own escapes are not re-escaped.
STUFFED = (0x7D, 0x7E)
XONXOFF_STUFFED = STUFFED + (0x11, 0x13, 0x91, 0x93)
#: Flags (2) + KIND SEQ ACK (3) + FCS (2): the bytes a frame adds to its body, unstuffed.
OVERHEAD = 7
#: Added to twice the window's transmit time to get the least reply timeout (DESIGN 4.1).
REPLY_MARGIN = 0.25  # the peer's commit before its ACK, scheduling, relays
VERSION = "MCCS/1"
REFUSED = b"REFUSED"  # body of the O that refuses a sign-on (a plain sign-off has none),
#: followed, toward a peer that authenticates, by a space and why (the refused end's LineDown says it)
AUTH_FAILED = "failed authentication (a different secret, or a replayed sign-on)"

#: VERIFYING: with a secret, we answered a sign-on with T and wait for the peer's proof (V).
DOWN, SIGNING_ON, VERIFYING, UP = "DOWN", "SIGNING_ON", "VERIFYING", "UP"


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
                 special: tuple[int, ...] = STUFFED) -> bytes:
    """One complete frame with flags, FCS and stuffing."""
    content = bytes((ord(kind), seq, ack)) + body
    return b"\x7e" + stuff(content + le16(x25(content)), special) + b"\x7e"


@dataclass(frozen=True)
class SignOn:
    """The values a sign-on (S) or its reply (T) carries. SESSION (a field added to the
    DESIGN's three) names one sign-on: T echoes the S it answers, so a late or repeated S or T
    is told apart from a new one and both ends reset their sequence state exactly once.
    AUTH (a nonce) and PROOF, hex, only with a secret (docs/PROTOCOL.md)."""
    host: str
    window: int
    maxmsg: int
    session: str = ""
    nonce: bytes = b""
    proof: bytes = b""

    def encode(self) -> bytes:
        text = f"{VERSION} HOST={self.host} WINDOW={self.window} MAXMSG={self.maxmsg}"
        text += f" SESSION={self.session}" if self.session else ""
        text += f" AUTH={self.nonce.hex()}" if self.nonce else ""
        text += f" PROOF={self.proof.hex()}" if self.proof else ""
        return text.encode("ascii")

    @classmethod
    def parse(cls, body: bytes) -> "SignOn | None":
        """The sign-on in `body`, or None when it is not a valid one (unknown fields are ignored)."""
        try:
            version, *tokens = body.decode("ascii").split(" ")
            fields = dict(t.split("=", 1) for t in tokens if "=" in t)
            signon = cls(check_host_id(fields["HOST"]), int(fields["WINDOW"]), int(fields["MAXMSG"]),
                         fields.get("SESSION", ""), bytes.fromhex(fields.get("AUTH", "")),
                         bytes.fromhex(fields.get("PROOF", "")))
        except (UnicodeDecodeError, KeyError, ValueError, IdError):
            return None
        ok = version == VERSION and 1 <= signon.window <= 127 and 0 <= signon.maxmsg <= 65535
        return signon if ok and len(signon.nonce) in (0, NONCE_SIZE) else None


class AsyncLine:
    """One end of an async line (DESIGN.md 4.0 interface). See the module docstring."""

    def __init__(self, local: str, peer: str, *, window: int = 8, baud: int = 9600,
                 max_message: int = 128, xonxoff_safe: bool = False, reply_timeout: float = 3.0,
                 retry_limit: int = 7, keepalive: float = 30.0, secret: bytes | None = None):
        if not 1 <= window <= 127:
            raise ValueError(f"window {window} is not within 1..127")
        if not 0 <= max_message <= 65535 or baud <= 0:
            raise ValueError(f"bad max_message {max_message} or baud {baud}")
        if secret is not None and not secret:
            raise ValueError("an empty secret")
        self.local, self.peer = check_host_id(local), check_host_id(peer)
        self.window, self.baud, self.max_message = window, baud, max_message
        self.special = XONXOFF_STUFFED if xonxoff_safe else STUFFED
        self.reply_timeout, self.retry_limit, self.keepalive = reply_timeout, retry_limit, keepalive
        self.counters = dict.fromkeys(
            ("frames_tx", "frames_rx", "bytes_tx", "bytes_rx", "retransmissions", "naks", "timeouts",
             "crc_errors", "garbage", "duplicates", "signons", "rejects_tx", "out_of_window",
             "oversized", "bad_frames", "busy_drops", "ignored", "keepalives", "internal_errors",
             "auth_failures"), 0)
        self.state = DOWN
        self._events: list = []
        self._out: list[bytes] = []
        self._now = 0.0
        # receive side: bytes after the last flag, and whether a flag has been seen since hunting
        self._rx = bytearray()
        self._hunting = True
        self.secret = secret
        self._overhead = OVERHEAD + (TRAILER_SIZE if secret is not None else 0)
        self._max_raw = 2 * (self._overhead + HEADER_SIZE + max(max_message, 64))
        self._held: deque[bytes] = deque()  # images handed over; _held[i] has SEQ tx_base + i
        self._busy = False       # the owner's set_busy(): outlives sign-ons
        self.session = ""        # SESSION of our last S
        self._peer_session = ""  # SESSION of the sign-on in force
        self._nonce = b""        # with a secret: AUTH of our last S
        self._hs: Handshake | None = None  # VERIFYING: the sign-on we answered
        self._t_body = b""       # the T we answered it with (sent again if the peer repeats its S)
        self._v_body = b""       # the V we proved ourselves with (sent again if the peer repeats its T)
        self._reset(window, max_message)

    # --- session state ---------------------------------------------------------------------
    def _reset(self, window: int, maxmsg: int) -> None:
        """Fresh sequence state, as after a sign-on (held images are kept: they go first)."""
        self._window, self._maxmsg = window, maxmsg
        self._tx_base = 0
        self._next_i = 0       # index in _held of the next frame to transmit
        self._high = 0         # frames _held[:_high] have been transmitted at least once
        self._rej_for = None   # ACK of the last N acted on (one go-back per reject)
        self._peer_busy = False
        self._rx_next = 0      # next SEQ expected
        self._rx_ack = 0       # next SEQ we may acknowledge (everything before it is confirmed)
        self._returned = 0     # _rx_next as of the last events() call
        self._queued = 0       # _rx_next when the last MessageReceived was queued
        self._ack_pending = False
        self._reject_due = False
        self._rejected_at = None  # _rx_next when the last N went out (one N per gap)
        self._awaiting = None  # "S", "D" or "P": what the reply timer waits for
        self._reply_at = None
        self._poll_at = None
        self._retries = 0
        self._last_rx = self._now
        self._auth: FrameAuth | None = None  # the frame keys while UP with a secret

    def _timeout(self) -> float:
        """The reply timeout: the configured base, raised to twice the window's transmit time
        (10 bit times a byte) plus a margin, since our window and the peer's may both be queued."""
        window_time = self._window * (self._overhead + HEADER_SIZE + self._maxmsg) * 10 / self.baud
        return max(self.reply_timeout, 2 * window_time + REPLY_MARGIN)

    # --- the interface (DESIGN.md 4.0) -----------------------------------------------------
    def start(self, now: float) -> None:
        """Sign on: send S and wait for T. Does nothing while UP or already signing on."""
        self._now = now
        if self.state != DOWN:
            return
        self.state = SIGNING_ON
        self._reset(self.window, self.max_message)
        self.session = secrets.token_hex(4)
        self._nonce = new_nonce() if self.secret is not None else b""
        self._send_signon("S", self.session)
        self._await("S")

    def stop(self, now: float) -> None:
        """Sign off: send O and go DOWN, handing back what is held."""
        self._now = now
        if self.state != DOWN:
            self._emit("O")
            self._down("stopped")

    def send(self, image: bytes) -> None:
        """Queue one message image for the peer (room() says how many are welcome)."""
        if len(image) > HEADER_SIZE + self._maxmsg:
            raise ValueError(f"image of {len(image)} bytes is over MAXMSG {self._maxmsg} of this line")
        self._held.append(bytes(image))

    def room(self) -> int:
        """Images the owner should hand over now: enough for a window in flight and one queued."""
        return max(0, 2 * self._window - len(self._held)) if self.state == UP else 0

    def set_busy(self, flag: bool) -> None:
        """No room for more: acknowledge with B (hold) instead of A until cleared; clearing sends A."""
        if flag != self._busy:
            self._busy = flag
            self._ack_pending = self.state == UP

    def confirm(self) -> None:
        """Every MessageReceived returned so far is durable: acknowledge them on the line."""
        if self._rx_ack != self._returned:
            self._rx_ack = self._returned
            self._ack_pending = True

    def events(self) -> list:
        self._returned = self._queued
        events, self._events = self._events, []
        return events

    def next_deadline(self) -> float | None:
        if self.state == DOWN:
            return None
        if self._reply_at is not None:
            return self._reply_at
        if self._poll_at is not None:
            return self._poll_at
        return self._last_rx + self.keepalive if self.state == UP else None

    def handle_timeout(self, now: float) -> None:
        self._now = now
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return
        if self._reply_at is not None:
            self._reply_timed_out()
        else:  # poll a busy peer, or keep a silent line alive: any frame back answers P
            self._poll_at = None
            self.counters["keepalives"] += not self._peer_busy
            self._emit("P")
            self._await("P")

    def data_to_send(self) -> bytes:
        if self.state == UP:
            self._pump()
            if self._reject_due:
                self._reject_due, self._rejected_at = False, self._rx_next
                self.counters["rejects_tx"] += 1
                self._emit("N", 0, self._rx_ack)
            elif self._ack_pending:
                self._emit("B" if self._busy else "A", 0, self._rx_ack)
            self._ack_pending = False
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes, now: float) -> None:
        """Bytes from the line: split at flags, check, act. Never raises; bad input is counted."""
        self._now = now
        data = bytes(data)
        self.counters["bytes_rx"] += len(data)
        if FLAG not in data:
            self._rx += data
            self._check_overrun()
            return
        parts = (bytes(self._rx) + data).split(b"\x7e")
        self._rx = bytearray(parts.pop())
        if self._hunting:
            self.counters["garbage"] += len(parts.pop(0))  # bytes before the first flag
        self._hunting = False
        self._check_overrun()
        for raw in parts:
            if raw:
                try:
                    self._frame_in(raw)
                except Exception:  # a bug must not take the daemon down: count, log, go on
                    self.counters["internal_errors"] += 1
                    log.exception("async line %s-%s: frame handling failed", self.local, self.peer)

    # --- transmit --------------------------------------------------------------------------
    def _emit(self, kind: str, seq: int = 0, ack: int = 0, body: bytes = b"",
              retransmit: bool = False, seal: bool = True) -> None:
        trailer = b""
        if seal and self._auth is not None and kind in SEALED:
            trailer = self._auth.seal(bytes((ord(kind), seq, ack)) + body)
        frame = encode_frame(kind, seq, ack, body + trailer, self.special)
        self._out.append(frame)
        self.counters["frames_tx"] += 1
        self.counters["bytes_tx"] += len(frame)
        origin, msg_id = key_of(body) if kind == "D" else (None, None)
        self._events.append(FrameTraced("tx", kind, len(frame), True, seq if kind == "D" else None,
                                        origin, msg_id, retransmit))

    def _signon_body(self, session: str, nonce: bytes = b"", proof: bytes = b"") -> bytes:
        return SignOn(self.local, self.window, self.max_message, session, nonce, proof).encode()

    def _send_signon(self, kind: str, session: str) -> None:
        self._emit(kind, body=self._signon_body(session, self._nonce if kind == "S" else b""))

    def _pump(self) -> None:
        """Send data frames while the window is open; each carries the newest confirmed ACK."""
        if self._peer_busy:
            return
        end = min(self._window, len(self._held))
        if self._next_i >= end:
            return
        while self._next_i < end:
            i = self._next_i
            again = i < self._high
            self.counters["retransmissions"] += again
            self._emit("D", (self._tx_base + i) & 0xFF, self._rx_ack, self._held[i], again)
            self._next_i = i + 1
        self._high = max(self._high, self._next_i)
        self._ack_pending = self._busy and self._ack_pending  # the ACK rode along (busy needs B)
        if self._awaiting != "D":
            self._await("D")

    def _await(self, what: str | None) -> None:
        """Start (or stop, with None) the reply timer for S, T (waiting for V), D or P."""
        self._awaiting = what
        self._reply_at = None if what is None else self._now + self._timeout()

    def _reply_timed_out(self) -> None:
        what = self._awaiting
        self.counters["timeouts"] += 1
        self._events.append(LineEvent("timeout", f"no answer to {what} in {self._timeout():.2f}s"))
        if self._retries >= self.retry_limit:
            self._down({"S": "no answer", "T": "no answer", "D": "retry limit", "P": "dead line"}[what])
            return
        self._retries += 1
        self._events.append(LineEvent("retry", f"{what} retry {self._retries}/{self.retry_limit}"))
        if what == "D":  # go back: all unacknowledged frames go again at the next data_to_send(),
            self._next_i = 0  # which re-arms the timer
            self._await(None)
            return
        if what == "S":
            self._send_signon("S", self.session)
        elif what == "T":
            self._emit("T", body=self._t_body)
        else:
            self._emit("P")
        self._await(what)

    def _down(self, reason: str) -> None:
        unacked = list(self._held)
        self._held.clear()
        self.state = DOWN
        self._reset(self.window, self.max_message)
        self._hs, self._t_body, self._v_body = None, b"", b""
        self._events.append(LineDown(reason, unacked))

    # --- receive ---------------------------------------------------------------------------
    def _check_overrun(self) -> None:
        """More bytes than any frame may have and no flag: drop them and hunt for a flag."""
        if len(self._rx) > self._max_raw:
            self.counters["garbage"] += len(self._rx)
            self._rx.clear()
            self._hunting = True

    def _frame_in(self, raw: bytes) -> None:
        """One flag-delimited chunk: check it and hand it to its kind's handler."""
        nbytes = len(raw) + 2
        if len(raw) > self._max_raw:
            self.counters["oversized"] += 1
            self._trace_rx("?", nbytes, False)
            return
        content = unstuff(raw)
        if content is None or len(content) < 5:  # a fragment (noise made or hid a flag)
            self.counters["garbage"] += len(raw)
            self._trace_rx("?", nbytes, False)
            return
        kind = chr(content[0])
        if x25(content[:-2]) != int.from_bytes(content[-2:], "little"):
            self.counters["crc_errors"] += 1
            self._trace_rx(kind if content[0] in KINDS else "?", nbytes, False)
            return
        if content[0] not in KINDS:
            self.counters["bad_frames"] += 1
            self._trace_rx("?", nbytes, False)
            return
        seq, ack, body = content[1], content[2], content[3:-2]
        if self._auth is not None and kind in SEALED:
            head, trailer = content[:-2 - TRAILER_SIZE], content[-2 - TRAILER_SIZE:-2]
            if len(head) < 3 or not self._auth.check(head, trailer):  # forged, replayed or stale
                self.counters["auth_failures"] += 1
                self._trace_rx(kind, nbytes, False)
                return
            body = head[3:]
        self.counters["frames_rx"] += 1
        if kind == "D":
            self._data_in(seq, ack, body, nbytes)
            return
        self._trace_rx(kind, nbytes, True)
        if kind in "STV":
            self._signon_in(kind, body)
        elif kind == "O":
            self._signoff_in(body)
        elif self.state != UP:
            self.counters["ignored"] += 1
        else:
            self._heard()
            if kind == "P":
                self._ack_pending = True
            else:
                self._ack_in(ack, kind)

    def _trace_rx(self, kind: str, nbytes: int, ok: bool, seq: int | None = None,
                  body: bytes = b"") -> None:
        origin, msg_id = key_of(body) if len(body) >= HEADER_SIZE else (None, None)
        self._events.append(FrameTraced("rx", kind, nbytes, ok, seq, origin, msg_id))

    def _heard(self) -> None:
        """A good frame from the signed-on peer: the line is alive (answers a P)."""
        self._last_rx = self._now
        if self._awaiting == "P":
            self._await(None)
            self._retries = 0
            if self._peer_busy:  # still busy unless this frame says otherwise: poll again later
                self._poll_at = self._now + self.reply_timeout

    def _ack_in(self, ack: int, kind: str) -> None:
        """A cumulative ACK (any of D A N B), then what the kind asks for."""
        n = (ack - self._tx_base) & 0xFF
        if n > self._high:  # acknowledges frames never sent: stale or forged
            self.counters["out_of_window"] += 1
            return
        if n:
            for _ in range(n):
                self._events.append(MessageAcked(self._held.popleft()))
            self._tx_base = ack
            self._next_i = max(0, self._next_i - n)
            self._high -= n
            self._rej_for = None
            self._retries = 0
            self._await("D" if self._next_i and not self._peer_busy else None)
        if kind == "B":
            self._peer_busy = True
            self._retries = 0
            self._await(None)
            self._poll_at = self._now + self.reply_timeout
        elif kind == "N" or kind == "A" and self._peer_busy:
            self._resume(kind, ack)

    def _resume(self, kind: str, ack: int) -> None:
        """Go back to the first unacknowledged frame: after a reject, or when a busy peer says A."""
        if kind == "N":
            self.counters["naks"] += 1
            if self._rej_for == ack:  # a repeated reject for the same frame: already going back
                return
            self._rej_for = ack
        self._peer_busy = False
        self._poll_at = None
        self._next_i = 0
        self._await(None)

    def _data_in(self, seq: int, ack: int, body: bytes, nbytes: int) -> None:
        if self.state != UP:
            self.counters["ignored"] += 1
            self._trace_rx("D", nbytes, True, seq, body)
            return
        self._heard()
        self._ack_in(ack, "D")
        d = (seq - self._rx_next) & 0xFF
        if d == 0 and len(body) > HEADER_SIZE + self._maxmsg:
            self.counters["oversized"] += 1
            self._trace_rx("D", nbytes, False, seq, body)
            return
        self._trace_rx("D", nbytes, True, seq, body)
        if d == 0:
            if self._busy:  # no room: drop it and say B again; the sender holds and polls
                self.counters["busy_drops"] += 1
                self._ack_pending = True
                return
            self._accept(body)
        elif d < self._window:  # a gap: something was lost; one reject per gap
            if self._busy:
                self._ack_pending = True
            elif self._rejected_at != self._rx_next:
                self._reject_due = True  # N goes at the next data_to_send(), with the newest ACK
        elif 256 - d <= self._window:  # already had it: acknowledge again (our ACK was lost)
            self.counters["duplicates"] += 1
            self._ack_pending = True
        else:
            self.counters["out_of_window"] += 1

    def _accept(self, body: bytes) -> None:
        self._rx_next = (self._rx_next + 1) & 0xFF
        self._rejected_at = None
        try:
            decode(body, self._maxmsg)
        except ImageError:  # a peer's bug, not noise (the FCS held): take it off the line, drop it
            self.counters["bad_frames"] += 1
            if self._rx_ack == self._queued:  # nothing awaits confirm(): acknowledge it now
                self._rx_ack = self._returned = self._rx_next
                self._ack_pending = True
            self._queued = self._rx_next
            return
        self._queued = self._rx_next
        self._events.append(MessageReceived(body))

    def _signon_in(self, kind: str, body: bytes) -> None:
        signon = SignOn.parse(body)
        if signon is None:
            self.counters["bad_frames"] += 1
            return
        if kind == "V":
            self._proof_in(signon)
            return
        if kind == "T" and (self.state != SIGNING_ON or signon.session != self.session):
            if self._v_body and self.state == UP and signon.session == self.session:
                self._emit("V", body=self._v_body)  # the peer repeats its T: our V was lost
            else:
                self.counters["ignored"] += 1  # a late or repeated reply
            return
        if signon.host != self.peer:
            self._refuse(signon.host, "", kind, "wrong peer")
        elif self.secret is not None and not signon.nonce:
            self._refuse(signon.host, "signed on without authentication, but this line has a secret",
                         kind, "no authentication")  # plain REFUSED: the peer may predate authentication
        elif self.secret is None and signon.nonce:
            self._refuse(signon.host, "asks for authentication, but this line has no secret",
                         kind, "no secret", "peer has no secret")
        elif self.secret is not None:
            (self._answer if kind == "S" else self._answered)(signon)
        elif kind == "S" and self.state == UP and signon.session and signon.session == self._peer_session:
            self._send_signon("T", signon.session)  # the peer repeated the S we answered: our T
        else:                                        # was lost or late; nothing was acknowledged yet
            if self.state == UP:
                self._down("peer restarted")
            self._go_up(signon, reply=("T", self._signon_body(signon.session)) if kind == "S" else None)

    def _go_up(self, signon: SignOn, hs: Handshake | None = None,
               reply: tuple[str, bytes] | None = None) -> None:
        """The sign-on `signon` is in force: fresh sequence state, the reply (T or V), LineUp."""
        self.state = UP
        self._peer_session = signon.session
        self._reset(min(self.window, signon.window), min(self.max_message, signon.maxmsg))
        self._auth = hs.frames(self.local) if hs is not None else None
        if reply:
            self._emit(reply[0], body=reply[1])
        self.counters["signons"] += 1
        self._events.append(LineUp(self.peer))

    def _refuse(self, host: str, why: str, kind: str, down: str, note: str = "") -> None:
        """Refuse a sign-on with O (never sealed: the peer may hold no key); a sign-on of ours
        under way (a T or V refused) goes DOWN with `down`."""
        self._emit("O", body=REFUSED + (b" " + note.encode("ascii") if note else b""), seal=False)
        self._events.append(PeerRefused(host, why))
        if kind != "S":
            self._down(down)

    def _answer(self, signon: SignOn) -> None:
        """With a secret: answer an S with T (our nonce and proof) and wait VERIFYING for V."""
        if self.state == SIGNING_ON and self.local > signon.host:
            self.counters["ignored"] += 1  # both signing on: the end with the lower host id answers
            return
        if self._t_body and signon.session == self._peer_session:
            self._emit("T", body=self._t_body)  # the peer repeated its S: our T was lost or late
            return
        if self.state == UP:
            self._down("peer restarted")
        self.state, self.session, self._peer_session = VERIFYING, "", signon.session
        self._reset(min(self.window, signon.window), min(self.max_message, signon.maxmsg))
        self._hs = hs = Handshake(self.secret, signon.host, self.local, signon.nonce, new_nonce())
        self._t_body = self._signon_body(signon.session, hs.responder_nonce, hs.proof(RESPONDER))
        self._emit("T", body=self._t_body)
        self._await("T")

    def _answered(self, signon: SignOn) -> None:
        """With a secret: the T to our S. A good proof takes us UP, proving ourselves with V."""
        hs = Handshake(self.secret, self.local, signon.host, self._nonce, signon.nonce)
        if not hs.verify(RESPONDER, signon.proof):
            self._refuse(signon.host, AUTH_FAILED, "T", "authentication failed", "authentication failed")
            return
        self._v_body = self._signon_body(signon.session, proof=hs.proof(INITIATOR))
        self._go_up(signon, hs, ("V", self._v_body))

    def _proof_in(self, signon: SignOn) -> None:
        """V: the proof of the end whose S we answered."""
        if self.state != VERIFYING or signon.session != self._peer_session or signon.host != self.peer:
            self.counters["ignored"] += 1
        elif self._hs.verify(INITIATOR, signon.proof):
            self._go_up(signon, self._hs)
        else:
            self._refuse(signon.host, AUTH_FAILED, "V", "authentication failed", "authentication failed")

    def _signoff_in(self, body: bytes) -> None:
        refused = body == REFUSED or body.startswith(REFUSED + b" ")
        why = "refused"
        if len(body) > len(REFUSED) + 1:  # the refusing end's note, shown as it came (printable, short)
            why += ": " + "".join(c if c.isprintable() else "?" for c in body[8:72].decode("ascii", "replace"))
        if self.state == UP:
            self._down(why if refused else "peer signed off")
        elif self.state in (SIGNING_ON, VERIFYING) and refused:
            self._down(why)
        else:
            self.counters["ignored"] += 1
