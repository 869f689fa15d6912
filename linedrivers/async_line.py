"""The async line protocol (docs/DESIGN.md 4.1) as a sans-I/O state machine.

Frames are `7E | KIND | SEQ | ACK | body | FCS | 7E`, byte-stuffed, FCS = CRC-16/X-25 low byte
first (CRC-32 on long frames with FEAT=FCS32). A go-back-N sliding window with cumulative ACKs
(piggybacked in D), reject (N), busy (B) with polling, keep-alive (P), sign-on (S/T) and sign-off
(O). The owner feeds bytes and time in and takes bytes, events and the next deadline out; nothing
here blocks, sleeps or reads a clock.

Control frames (A, N, B) and data frames are built when the owner asks for bytes
(data_to_send), so they always carry the newest acknowledgement the owner has confirmed.

With a `secret` the sign-on is S (AUTH=nonce) -> T (AUTH=nonce PROOF=...) -> V (PROOF=...), the
answering end going UP only on a good V, and every D A N B P O of the session carries a trailer
(counter and MAC, see auth.py) inside the FCS; docs/PROTOCOL.md has the layouts.

Parts: async_frames (the wire and the Deframer), async_states (states and the sign-on table),
async_signon (sign-on, sign-off and refusals), async_sizing (the segment size for the line's error
rate); here the window, acknowledgements and timers.
"""
from __future__ import annotations

import logging
import math
import secrets
from collections import deque
from collections.abc import Callable
from itertools import islice

from .async_frames import (ABORT, ABORT_BYTES, FCS32, FCS32_EXTRA, FEC, LONG_BODY, OVERHEAD, SEALED, SREJ, STUFFED,
                           XONXOFF_STUFFED, Deframer, SignOn, encode_frame, stuff, unstuff)
from .async_signon import AsyncSignOn
from .async_sizing import LEAST_SEGMENT, ErrorRate, best_choice
from .async_states import GIVE_UP, Await, State
from .auth import TRAILER_SIZE, FrameAuth, Handshake
from .events import Event, FrameTraced, LineDown, LineEvent, MessageAcked, MessageReceived
from .ids import check_host_id
from .image import HEADER_SIZE, ImageError, decode, key_of

__all__ = ["AsyncLine", "SignOn", "encode_frame", "stuff", "unstuff"]  # the wire's names, as before the split

log = logging.getLogger(__name__)

#: Added to twice the window's transmit time to get the least reply timeout (DESIGN 4.1).
REPLY_MARGIN = 0.25  # the peer's commit before its ACK, scheduling, relays
#: Added to the time a frame asked for with R needs to come back before it is asked for again.
ASK_MARGIN = 0.1  # the line's latency both ways, scheduling, relays; no commit is waited for
#: The segment size is chosen for the error rate in steps of this factor (log): 5%.
RATE_STEP = math.log(1.05)
#: An error rate below which the best length is the longest a frame may be (64 KiB frames fail once in
#: 150,000): taken as none, so that a clean line's estimate, which falls on forever, stops moving the choice
RATE_FLOOR = 1e-10
#: _choice's answers by all they depend on, for every line of the process: lines alike (a hub's,
#: a simulated network's) search once a step of the error rate, not each (a clean line's estimate
#: falls a step about every frame); at most this many kept
CHOICES_KEPT = 4096
_CHOICES: dict[tuple, tuple[int, bool]] = {}
#: With ABORT agreed, a frame longer than PACE seconds on the wire (a data frame of 128 bytes at 9600
#: baud) goes to the port in pieces that keep it at most PACE seconds ahead of the wire: what a frame
#: of higher priority waits behind once it cuts in. Shorter frames go whole, as without ABORT.
PACE = 0.06
#: ... the next piece when this much of the last is left (next_write): a write every PACE - PACE_LEFT
#: seconds while a long frame goes, and as long for it to come.
PACE_LEFT = 0.02


class AsyncLine(AsyncSignOn):
    """One end of an async line (docs/DESIGN.md 4.0 interface). See the module docstring."""

    def __init__(self, local: str, peer: str, *, window: int = 8, baud: int = 9600,
                 max_message: int = 128, xonxoff_safe: bool = False, reply_timeout: float = 3.0,
                 retry_limit: int = 7, keepalive: float = 30.0, secret: bytes | None = None,
                 features: tuple[str, ...] = (), selective_repeat: bool = True, large: int = 0,
                 fcs32: bool | None = None, fec: bool | None = None, abort: bool = False,
                 pace: float = PACE, random_bytes: Callable[[int], bytes] = secrets.token_bytes):
        if not 1 <= window <= 127:
            raise ValueError(f"window {window} is not within 1..127")
        if not 0 <= max_message <= 65535 or baud <= 0:
            raise ValueError(f"bad max_message {max_message} or baud {baud}")
        if secret is not None and not secret:
            raise ValueError("an empty secret")
        self.local, self.peer = check_host_id(local), check_host_id(peer)
        self.random_bytes = random_bytes  # sessions and nonces: secrets by default, seeded in tests
        self.window, self.baud, self.max_message = window, baud, max_message
        self.large = large  # offered as LARGE= at sign-on: the owner cuts larger messages in segments
        self.special = XONXOFF_STUFFED if xonxoff_safe else STUFFED
        self.reply_timeout, self.retry_limit, self.keepalive = reply_timeout, retry_limit, keepalive
        self.counters = dict.fromkeys(
            ("frames_tx", "frames_rx", "bytes_tx", "bytes_rx", "retransmissions", "naks", "timeouts",
             "crc_errors", "garbage", "duplicates", "signons", "rejects_tx", "out_of_window",
             "oversized", "bad_frames", "busy_drops", "ignored", "keepalives", "internal_errors",
             "auth_failures", "reasks", "fec_frames", "fec_mended", "aborts", "aborts_rx"), 0)
        self.state = State.DOWN
        self._events: list[Event] = []
        self._out: list[bytes] = []  # frames to hand to the port, in order
        self._partly = False
        self._now = 0.0
        self.secret = secret
        # offered at sign-on; LineUp says which both ends offered. SREJ, FCS32, FEC and ABORT are
        # this machine's own; FCS32 and FEC by default go with SREJ (selective_repeat=False speaks
        # docs/DESIGN.md 4.1 as it was); FEC needs FCS32. ABORT is offered when asked (the daemon's
        # lines do by default: frame_abort): with it agreed, writes are paced to the baud (`pace`).
        fcs32 = selective_repeat if fcs32 is None else fcs32
        fec = fcs32 if fec is None else fec and fcs32
        self.features = tuple(features) + tuple(name for name, on in ((SREJ, selective_repeat), (FCS32, fcs32),
                                                                     (FEC, fec), (ABORT, abort)) if on)
        self.pace, self._char = pace, 10 / baud
        self._left = min(PACE_LEFT, pace / 2)  # the next piece when this much of the last is left
        self._overhead = OVERHEAD + (TRAILER_SIZE if secret is not None else 0)
        self._deframer = Deframer(2 * (self._overhead + FCS32_EXTRA + HEADER_SIZE + max(max_message, 64)),
                                  self.counters)
        self._errors = ErrorRate()  # the line's, so it outlives sign-ons
        self._chosen: tuple = (None, (0, False))  # _choice()'s last inputs and answer
        self._held: deque[bytes] = deque()  # images handed over; _held[i] has SEQ tx_base + i
        self._prio: deque[int] = deque()  # _held[i]'s priority: a higher one goes before those not yet sent
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
        self._rej_for: int | None = None  # ACK of the last N acted on (one go-back per reject)
        self._peer_busy = False
        self._rx_next = 0      # next SEQ expected
        self._rx_ack = 0       # next SEQ we may acknowledge (everything before it is confirmed)
        self._returned = 0     # _rx_next as of the last events() call
        self._queued = 0       # _rx_next when the last MessageReceived was queued
        self._ack_pending = False
        self._reject_due = False
        self._last_byte = self._now  # any byte from the line, even a damaged one
        self._sr = False         # selective repeat agreed at sign-on (FEAT=SREJ at both ends)
        self._fcs32 = self._deframer.fcs32 = False  # CRC-32 on long frames agreed (FEAT=FCS32 at both ends)
        self._fec = self._deframer.fec = False  # F frames agreed (FEAT=FEC at both ends)
        self._abort = self._deframer.abort = False  # frame abort agreed (FEAT=ABORT at both ends): writes paced
        self._wire_free = self._now  # when the bytes handed so far are out, at the baud (paced writes)
        self._last_d: tuple[bytes, int, bool] | None = None  # the newest D frame sent first, its SEQ, and
        # whether its bytes began to be handed: what a frame of higher priority may cut short (_cut_short)
        if self._partly:  # the rest of a frame the reset broke off: the peer drops what came of it
            self._out.pop(0)
        self._partly = False  # _out[0] is the rest of a frame partly handed (paced writes)
        self._mended = 0       # bytes our parity checks mended this session (A and B say it, mod 256)
        self._peer_mended = 0  # what the peer's last A or B said
        self._peer_frame = 0     # bytes of the longest frame heard this session
        self._recent: deque[int] = deque(maxlen=window)  # bytes of the last frames heard
        self._early: dict[int, bytes] = {}   # SEQ -> body received after a gap, kept for order
        self._asked: dict[int, tuple[float, float]] = {}  # SEQ -> when we last asked for it with R,
        # and how long it may take to come before the timer asks again (0: no timer, see _reask)
        self._ask_due: list[int] = []        # SEQs to ask for with R at the next data_to_send()
        self._resend: set[int] = set()       # SEQs the peer asked for with R (or the oldest, after a timeout)
        self._rejected_at: int | None = None  # _rx_next when the last N went out (one N per gap)
        self._awaiting: Await | None = None  # what the reply timer waits for
        self._await_since = self._now
        self._reply_at: float | None = None  # when the reply timer runs out (None: not running)
        self._poll_at: float | None = None   # when to poll a busy peer with P
        self._retries = 0
        self._last_rx = self._now
        self._auth: FrameAuth | None = None  # the frame keys while UP with a secret

    def _frame_bytes(self, image: int) -> int:
        """Bytes of the frame that carries an image of `image` bytes (unstuffed): flags, KIND SEQ
        ACK, the image, the trailer, and the FCS (CRC-32 when agreed and the body is long)."""
        long = self._fcs32 and image + self._overhead - OVERHEAD > LONG_BODY
        return self._overhead + image + (FCS32_EXTRA if long else 0)

    def _timeout(self) -> float:
        """The reply timeout: the configured base, raised to twice the time a window of the frames
        in use takes at the baud (10 bit times a byte) plus a margin, since our window and the
        peer's may both be queued. While UP the frames in use are the longest of ours in the
        window, of the peer's heard this session, and of one arriving now, at most a MAXMSG frame,
        so short segments on a line with a large MAXMSG keep the timer short. Signing on, nothing
        is known of the peer's frames: a MAXMSG frame."""
        largest = self._frame_bytes(HEADER_SIZE + self._maxmsg)
        if self.state is not State.UP:
            return self._timeout_for(largest)
        return self._timeout_for(min(largest, max(self._our_frame(), self._peer_frame, self._deframer.pending)))

    def _our_frame(self) -> int:
        """Bytes of the longest of our frames in the window (0 with none)."""
        longest = max(map(len, islice(self._held, self._window)), default=None)  # (a frame grows with its image)
        return 0 if longest is None else self._frame_bytes(longest)

    def _recent_frame(self) -> int:
        """Bytes of the peer's frames now: the longest of its last window of frames or of one
        arriving, at most a MAXMSG frame (segments change size as the line's errors do)."""
        return min(self._frame_bytes(HEADER_SIZE + self._maxmsg), max(*self._recent, self._deframer.pending, 0))

    def _timeout_for(self, frame: int) -> float:
        """The reply timeout for frames of `frame` bytes (see _timeout)."""
        return max(self.reply_timeout, 2 * self._window * frame * 10 / self.baud + REPLY_MARGIN)

    def _ask_wait_for(self, ours: int, theirs: int) -> float:
        """How long a frame asked for with R may take to come before it is asked for again. The
        line is FIFO and the peer sends frames asked for before new ones, so it is the R behind
        a window of our frames of `ours` bytes, at most a window of the peer's frames of `theirs`
        bytes (those it sent before the R came, and the frame itself), and a margin: about a
        round trip, far less than a reply timeout, which also waits for the peer's commit."""
        return (self._overhead + self._window * (ours + theirs)) * 10 / self.baud + ASK_MARGIN

    def _silence(self) -> float:
        """A line that brought no byte at all for this long while an answer is awaited is down (a
        cut cable, a dead peer), found sooner than by the whole retry limit: a live peer answers
        within a reply timeout, and a long frame on its way is bytes arriving. An idle line's
        keep-alive goes after `keepalive` of silence: two reply timeouts more without a byte, and
        it is down (at most two keep-alives: 36 s with the defaults, so that routes move round a
        cut within a minute: docs/ROUTING.md)."""
        timeout = self._timeout()
        return max(2 * timeout, min(2 * self.keepalive, self.keepalive + 2 * timeout))

    # --- the interface (docs/DESIGN.md 4.0) -----------------------------------------------------
    def start(self, now: float) -> None:
        """Sign on: send S and wait for T. Does nothing while UP or already signing on."""
        self._now = now
        if self.state is not State.DOWN:
            return
        self.state = State.SIGNING_ON
        self._reset(self.window, self.max_message)
        self._sign_on()

    def stop(self, now: float) -> None:
        """Sign off: send O and go DOWN, handing back what is held."""
        self._now = now
        if self.state is not State.DOWN:
            self._emit("O")
            self._down("stopped")

    def send(self, image: bytes, priority: int = 0) -> None:
        """Queue one message image for the peer (room() says how many are welcome). It goes before
        the images of lower priority not yet sent, and with ABORT agreed cuts short such a frame
        that is being sent (the peer drops it; it goes again after this one, under the next SEQ)."""
        if len(image) > HEADER_SIZE + self._maxmsg:
            raise ValueError(f"image of {len(image)} bytes is over MAXMSG {self._maxmsg} of this line")
        start = max(self._next_i, self._high)  # what was sent keeps its SEQ: the peer may have it
        at = next((i for i in range(start, len(self._held)) if self._prio[i] < priority), len(self._held))
        if at == start and self._cut_short(priority):
            at = self._next_i
        self._held.insert(at, bytes(image))
        self._prio.insert(at, priority)

    def _cut_short(self, priority: int) -> bool:
        """Take back the newest D frame if it is a first sending of lower priority and not all of
        it is handed yet: the rest of it becomes ABORT_BYTES (nothing, if none of it was handed),
        and its image goes again as if never sent. Only with writes paced (ABORT agreed) does a
        frame stay partly unhanded."""
        if self._last_d is None:
            return False
        frame, seq, started = self._last_d
        i = (seq - self._tx_base) & 0xFF
        at = next((k for k, f in enumerate(self._out) if f is frame), None)
        if at is None or i != self._next_i - 1 or i != self._high - 1 or self._prio[i] >= priority:
            return False
        if started:  # the rest of the frame at the head of _out
            self._out[0], self._partly = ABORT_BYTES, False
            self.counters["aborts"] += 1
        else:
            del self._out[at]
        self._next_i = self._high = i
        self._last_d = None
        self._events.append(FrameTraced("tx", "ABORT", len(ABORT_BYTES) if started else 0, True, seq,
                                        *key_of(self._held[i])))
        return True

    #: Full duplex: the peer never holds the line (BscLine.receiving).
    receiving = False

    def room(self) -> int:
        """Images the owner should hand over now: enough for a window in flight and one queued."""
        return max(0, 2 * self._window - len(self._held)) if self.state is State.UP else 0

    def segment_size(self) -> int:
        """MESSAGE bytes the owner should put in the next image when it cuts a large message in
        segments: the length that carries the most at the line's recent error rate (async_sizing),
        at least LEAST_SEGMENT (or MAXMSG if smaller), at most the agreed MAXMSG (an image must
        fit one frame)."""
        return self._choice()[0]

    def _choice(self) -> tuple[int, bool]:
        """The segment length and whether long D frames carry parity (F frames), as best for the
        line's error rate; parity only with FEC agreed and once the line has shown damage. The
        rate is taken in steps of 5% (the best length hardly moves within one), so the search runs
        again only when the rate or the agreement moved, and once for all lines alike (_CHOICES)."""
        p = self._errors.rate
        step = round(math.log(p) / RATE_STEP) if p > RATE_FLOOR else None
        key = (step, self._sr, self._fcs32, self._maxmsg, self._window, self._fec and self._errors.observed)
        if self._chosen[0] != key:
            whole = (*key, self._overhead, self.baud, self.reply_timeout)  # (all the search depends on)
            choice = _CHOICES.get(whole)
            if choice is None:
                choice = self._search(step, key[-1])
                if len(_CHOICES) >= CHOICES_KEPT:
                    _CHOICES.clear()
                _CHOICES[whole] = choice
            self._chosen = key, choice
        return self._chosen[1]

    def _search(self, step: int | None, fec: bool) -> tuple[int, bool]:
        """best_choice for this line's framing and timers at the rate of `step` (None: no errors)."""
        overhead = self._frame_bytes(HEADER_SIZE + LONG_BODY) - LONG_BODY  # of a long frame
        if self._sr:  # a lost copy is asked for again after about a round trip (_reask)
            def stall(n):
                return self._ask_wait_for(0, n) * self.baud / 10
        else:
            def stall(n):
                return self._timeout_for(n) * self.baud / 10
        return best_choice(math.exp(step * RATE_STEP) if step is not None else 0.0, overhead, stall,
                           0 if self._sr else self._window - 1, min(LEAST_SEGMENT, self._maxmsg), self._maxmsg, fec)

    def set_busy(self, flag: bool) -> None:
        """No room for more: acknowledge with B (hold) instead of A until cleared; clearing sends A."""
        if flag != self._busy:
            self._busy = flag
            self._ack_pending = self.state is State.UP

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
        if self.state is State.DOWN:
            return None
        times = [] if self._busy else [at + wait for at, wait in self._asked.values() if wait]
        if self._abort and not self._out and self._next_i < min(self._window, len(self._held)) and not self._peer_busy:
            times.append(self._wire_free - self._left)  # paced: the next frame is built (its events: a pass)
        line = self._line_deadline()
        return min(times + [line]) if line is not None else min(times, default=None)

    def next_write(self) -> float | None:
        """Paced (ABORT agreed): when paced() has the next piece of a frame built already. Only
        bytes, no event: the owner writes them without a pass of its own."""
        return self._wire_free - self._left if self._abort and self._out and self.state is not State.DOWN else None

    def paced(self, now: float) -> bytes:
        """The next pieces of the frames built already, due by `now` (next_write)."""
        self._now = max(self._now, now)
        return self._paced() if self._abort and self._out else b""

    def _line_deadline(self) -> float | None:
        """The next deadline of the reply timer, the silence rule, the poll or the keep-alive."""
        if self._reply_at is not None:
            if self.state is State.UP:
                return min(self._reply_at, self._last_byte + self._silence())
            return self._reply_at
        if self._poll_at is not None:
            return self._poll_at
        return self._last_rx + self.keepalive if self.state is State.UP else None

    def handle_timeout(self, now: float) -> None:
        self._now = now
        if self.state is State.UP:
            self._reask()
        deadline = self._line_deadline() if self.state is not State.DOWN else None
        if deadline is None or now < deadline:
            return
        if self._reply_at is not None and self.state is State.UP and now >= self._last_byte + self._silence():
            self.counters["timeouts"] += 1
            self._down(f"silent line: nothing heard for {now - self._last_byte:.1f}s")
        elif self._reply_at is not None:
            self._reply_timed_out()
        else:  # poll a busy peer, or keep a silent line alive: any frame back answers P
            self._poll_at = None
            self.counters["keepalives"] += not self._peer_busy
            self._emit("P")
            self._await(Await.POLL)

    def bytes_wanted(self) -> int:
        """At least how many more received bytes it takes to finish the frame arriving (1: unknown)."""
        return self._deframer.wanted()

    def unconfirmed_room(self) -> int:
        """Data frames the peer may still send before it waits for our acknowledgement: the agreed
        window less the messages received and not yet confirmed (0 while busy or not UP)."""
        if self.state is not State.UP or self._busy:
            return 0
        return max(0, self._window - ((self._rx_next - self._rx_ack) & 0xFF))

    def data_to_send(self, now: float | None = None) -> bytes:
        """The bytes to write now (`now`: the time, if later than the machine has heard of: writes
        are paced by it while ABORT is agreed)."""
        if now is not None:
            self._now = max(self._now, now)
        if self.state is State.UP:
            self._pump()
            if self._reject_due:
                self._reject_due, self._rejected_at = False, self._rx_next
                self.counters["rejects_tx"] += 1
                self._emit("N", 0, self._rx_ack)
            elif self._ask_due:  # each carries the newest ACK too
                for seq in self._ask_due:
                    self.counters["rejects_tx"] += 1
                    self._emit("R", seq, self._rx_ack)
            elif self._ack_pending:
                # with FEC, A and B say how many bytes our parity checks mended (docs/PROTOCOL.md)
                mended = bytes((self._mended & 0xFF,)) if self._fec else b""
                self._emit("B" if self._busy else "A", 0, self._rx_ack, mended)
            self._ack_pending = False
            self._ask_due.clear()
        if not self._out:
            return b""
        return self._paced() if self._abort else self._take_all()

    def _take_all(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        self._partly = False
        return out

    def _ahead(self) -> float:
        """Seconds of the bytes handed to the port that are not yet out on the wire, at the baud."""
        return max(0.0, self._wire_free - self._now)

    def _paced(self) -> bytes:
        """What of _out goes to the port now (ABORT agreed): short frames whole, and of a long one
        what keeps the port no more than `pace` ahead of the wire, so that a frame of higher
        priority can still cut in before the rest of it."""
        ahead, out = self._ahead(), []
        while self._out:
            head = self._out[0]
            if len(head) * self._char > self.pace:  # a long frame: a piece of it, if any
                n = int((self.pace - ahead) / self._char)
                if n > 0:
                    out.append(head[:n])
                    rest = self._out[0] = head[n:]
                    self._partly = True
                    ahead += n * self._char
                    if self._last_d is not None and self._last_d[0] is head:
                        self._last_d = (rest, self._last_d[1], True)
                break
            out.append(self._out.pop(0))
            self._partly = False
            ahead += len(head) * self._char
        if out:
            self._wire_free = self._now + ahead
        return b"".join(out)

    def receive_data(self, data: bytes, now: float) -> None:
        """Bytes from the line: split at flags, check, act. Never raises; bad input is counted."""
        self._now = now
        data = bytes(data)
        self.counters["bytes_rx"] += len(data)
        if data:
            self._last_byte = now
        for frame in self._deframer.feed(data):
            if frame.kind == "ABORT":  # the peer cut its frame short for another: no damage, no evidence
                self._trace_rx(frame.kind, frame.nbytes, True)
                continue
            self._peer_frame = max(self._peer_frame, frame.nbytes)
            self._recent.append(frame.nbytes)
            self._exposed(frame.nbytes)
            if frame.content is None:
                self._errors.failed()
                self._trace_rx(frame.kind, frame.nbytes, False)
                continue
            if frame.mended:
                self._mended += frame.mended
                self._errors.failed(frame.mended)
            try:
                self._frame_in(frame.kind, frame.content, frame.nbytes)
            except Exception:  # a bug must not take the daemon down: count, log, go on
                self.counters["internal_errors"] += 1
                log.exception("async line %s-%s: frame handling failed", self.local, self.peer)

    # --- transmit --------------------------------------------------------------------------
    def _emit(self, kind: str, seq: int = 0, ack: int = 0, body: bytes = b"",
              retransmit: bool = False, seal: bool = True) -> None:
        trailer = b""
        if seal and self._auth is not None and kind in SEALED:
            trailer = self._auth.seal(bytes((ord(kind), seq, ack)) + body)
        fec = kind == "D" and self._fec and len(body) > LONG_BODY and self._choice()[1]
        frame = encode_frame(kind, seq, ack, body + trailer, self.special, self._fcs32, fec)
        self.counters["fec_frames"] += fec
        if kind == "D":  # its loss comes back as R, N or a timeout
            self._exposed(len(frame))
        self._out.append(frame)
        self.counters["frames_tx"] += 1
        self.counters["bytes_tx"] += len(frame)
        origin, msg_id = key_of(body) if kind == "D" else (None, None)
        self._events.append(FrameTraced("tx", kind, len(frame), True, seq if kind == "D" else None,
                                        origin, msg_id, retransmit))

    def _pump(self) -> None:
        """Send data frames while the window is open; each carries the newest confirmed ACK.
        With selective repeat, the frames asked for again go first, and only they."""
        if self._peer_busy:
            return
        again = sorted(i for i in ((seq - self._tx_base) & 0xFF for seq in self._resend) if i < self._next_i) \
            if self._resend else []
        self._resend.clear()
        for i in again:
            self.counters["retransmissions"] += 1
            self._emit("D", (self._tx_base + i) & 0xFF, self._rx_ack, self._held[i], True)
        end = min(self._window, len(self._held))
        queued = self._ahead() + sum(map(len, self._out)) * self._char if self._abort else 0.0
        first = self._next_i
        while self._next_i < end and (not self._abort or self._goes_now(queued, self._held[self._next_i])):
            i = self._next_i
            resent = i < self._high
            self.counters["retransmissions"] += resent
            seq = (self._tx_base + i) & 0xFF
            self._emit("D", seq, self._rx_ack, self._held[i], resent)
            self._last_d = None if resent else (self._out[-1], seq, False)
            queued += len(self._out[-1]) * self._char
            self._next_i = i + 1
        if self._next_i == first:  # nothing new: the window is full, or (paced) the wire is far enough ahead
            if again and self._awaiting is not Await.DATA:
                self._await(Await.DATA)
            return
        self._high = max(self._high, self._next_i)
        self._ack_pending = self._busy and self._ack_pending  # the ACK rode along (busy needs B)
        if self._awaiting is not Await.DATA:
            self._await(Await.DATA)

    def _goes_now(self, queued: float, image: bytes) -> bool:
        """Paced (`queued`: seconds of bytes ahead of the wire, handed or not): whether the frame of
        `image` begins to be handed now (see _paced), so that one not yet begun stays unbuilt and
        an image of higher priority goes before it."""
        return queued < self.pace or self._frame_bytes(len(image)) * self._char <= self.pace

    def _exposed(self, nbytes: int) -> None:
        """A frame went over the line, either way: evidence for the error rate."""
        self._errors.exposed(nbytes, self._frame_bytes(HEADER_SIZE + self.segment_size()))

    def _await(self, what: Await | None) -> None:
        """Start (or stop, with None) the reply timer."""
        self._awaiting, self._await_since = what, self._now
        self._reply_at = None if what is None else self._now + self._timeout()

    def _reply_timed_out(self) -> None:
        what = self._awaiting
        assert what is not None  # the reply timer runs (_reply_at) only while awaiting something
        if self._now < self._await_since + self._timeout():  # a longer frame than the timer allowed
            self._reply_at = self._await_since + self._timeout()  # for is arriving: wait for it
            return
        self.counters["timeouts"] += 1
        if what is Await.DATA:
            self._errors.failed()
        self._events.append(LineEvent("timeout", f"no answer to {what} in {self._timeout():.2f}s"))
        if self._retries >= self.retry_limit:
            self._down(GIVE_UP[what])
            return
        self._retries += 1
        self._events.append(LineEvent("retry", f"{what} retry {self._retries}/{self.retry_limit}"))
        if what is Await.DATA:  # go back: every unacknowledged frame goes again at the next
            self._next_i = 0  # data_to_send(), which re-arms the timer (with selective repeat the
            self._await(None)  # peer keeps what it has: on a very noisy line each copy is a chance)
            return
        if what is Await.SIGNON:
            self._send_signon("S", self.session)
        elif what is Await.PROOF:
            self._emit("T", body=self._t_body)
        else:
            self._emit("P")
        self._await(what)

    def _down(self, reason: str) -> None:
        unacked = list(self._held)
        self._held.clear()
        self._prio.clear()
        self.state = State.DOWN
        self._reset(self.window, self.max_message)
        self._hs, self._t_body, self._v_body = None, b"", b""
        self._events.append(LineDown(reason, unacked))

    # --- receive ---------------------------------------------------------------------------
    def _frame_in(self, kind: str, content: bytes, nbytes: int) -> None:
        """One frame whose FCS held (`content`: KIND SEQ ACK body): to its kind's handler."""
        seq, ack, body = content[1], content[2], content[3:]
        if self._auth is not None and kind in SEALED:
            head, trailer = content[:-TRAILER_SIZE], content[-TRAILER_SIZE:]
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
        if kind in "STVO":
            self._signon_in(kind, body)
        elif self.state is not State.UP:
            self.counters["ignored"] += 1
        else:
            self._heard()
            if kind == "P":
                self._ack_pending = True
            else:
                if kind in "AB" and self._fec and body:
                    self._errors.failed((body[0] - self._peer_mended) & 0xFF)  # what the peer mended
                    self._peer_mended = body[0]
                self._ack_in(ack, kind, seq)

    def _trace_rx(self, kind: str, nbytes: int, ok: bool, seq: int | None = None,
                  body: bytes = b"") -> None:
        origin, msg_id = key_of(body) if len(body) >= HEADER_SIZE else (None, None)
        self._events.append(FrameTraced("rx", kind, nbytes, ok, seq, origin, msg_id))

    def _heard(self) -> None:
        """A good frame from the signed-on peer: the line is alive (answers a P)."""
        self._last_rx = self._now
        if self._awaiting is Await.POLL:
            self._await(None)
            self._retries = 0
            if self._peer_busy:  # still busy unless this frame says otherwise: poll again later
                self._poll_at = self._now + self.reply_timeout

    def _ack_in(self, ack: int, kind: str, seq: int = 0) -> None:
        """A cumulative ACK (any of D A N B R), then what the kind asks for."""
        n = (ack - self._tx_base) & 0xFF
        if n > self._high:  # acknowledges frames never sent: stale or forged
            self.counters["out_of_window"] += 1
            return
        if n:
            for _ in range(n):
                self._events.append(MessageAcked(self._held.popleft()))
                self._prio.popleft()
            self._tx_base = ack
            self._next_i = max(0, self._next_i - n)
            self._high -= n
            self._rej_for = None
            self._retries = 0
            self._await(Await.DATA if self._next_i and not self._peer_busy else None)
        if kind == "B":
            self._peer_busy = True
            self._retries = 0
            self._await(None)
            self._poll_at = self._now + self.reply_timeout
        elif kind == "R":
            self.counters["naks"] += 1
            self._errors.failed()
            if self._peer_busy:  # the peer takes frames again (its R came where an A would): resume
                self._resume("A", ack)
            else:
                self._resend.add(seq)  # that frame only, if it is still unacknowledged (see _pump)
        elif kind == "N" or kind == "A" and self._peer_busy:
            self._resume(kind, ack)

    def _resume(self, kind: str, ack: int) -> None:
        """Go back to the first unacknowledged frame: after a reject, or when a busy peer says A."""
        if kind == "N":
            self.counters["naks"] += 1
            if self._rej_for == ack:  # a repeated reject for the same frame: already going back
                return
            self._rej_for = ack
            self._errors.failed()
        self._peer_busy = False
        self._poll_at = None
        self._next_i = 0
        self._resend.clear()
        self._await(None)

    def _data_in(self, seq: int, ack: int, body: bytes, nbytes: int) -> None:
        if self.state is not State.UP:
            self.counters["ignored"] += 1
            self._trace_rx("D", nbytes, True, seq, body)
            return
        self._heard()
        self._ack_in(ack, "D")
        d = (seq - self._rx_next) & 0xFF
        if d < self._window and len(body) > HEADER_SIZE + self._maxmsg:
            self.counters["oversized"] += 1
            self._trace_rx("D", nbytes, False, seq, body)
            return
        if d < self._window and not _image_ok(body, self._maxmsg):
            # the FCS held but the image is broken: damage the FCS missed (a lost byte can hide
            # from CRC-16). Not taken: the sender sends it again, as after a bad FCS.
            self.counters["bad_frames"] += 1
            self._trace_rx("D", nbytes, False, seq, body)
            return
        self._trace_rx("D", nbytes, True, seq, body)
        if d == 0:
            if self._busy:  # no room: drop it and say B again; the sender holds and polls
                self.counters["busy_drops"] += 1
                self._ack_pending = True
                return
            self._accept(body)
            while self._rx_next in self._early:  # what came after the gap follows it now
                self._accept(self._early.pop(self._rx_next))
        elif d < self._window:  # a gap: something was lost; one reject per gap
            if self._busy:
                self._ack_pending = True
            elif self._sr:
                self._keep_early(seq, d, body)
            elif self._rejected_at != self._rx_next:
                self._reject_due = True  # N goes at the next data_to_send(), with the newest ACK
        elif 256 - d <= self._window:  # already had it: acknowledge again (our ACK was lost)
            self.counters["duplicates"] += 1
            self._ack_pending = True
        else:
            self.counters["out_of_window"] += 1

    def _keep_early(self, seq: int, d: int, body: bytes) -> None:
        """Selective repeat: keep a frame that came after a gap, and ask with R for each frame
        missing before it (again by _reask's timer, or after a reply timeout when a later frame
        shows it still missing)."""
        if seq in self._early:
            self.counters["duplicates"] += 1
            return
        self._early[seq] = body
        self._asked.pop(seq, None)
        for k in range(d):
            missing = (self._rx_next + k) & 0xFF
            if missing not in self._early and self._now >= self._asked.get(missing, (-1e9,))[0] + self._timeout():
                self._ask(missing, self._ask_wait_for(self._our_frame(), self._recent_frame()))

    def _ask(self, seq: int, wait: float) -> None:
        """Ask for `seq` with R at the next data_to_send(); the timer asks again after `wait` (0: never)."""
        self._asked[seq] = (self._now, wait)
        self._ask_due.append(seq)

    def _reask(self) -> None:
        """Ask again at once for each frame asked for with R that has not come in the time it
        needed: the R or the copy was lost, found in about a round trip instead of a reply timeout.
        Each time the wait doubles (the peer may be slower than thought); once it would reach the
        reply timeout the timer stops, and a later frame asks again after a reply timeout, or the
        sender's reply timer sends the window again, as before. Nothing here counts toward the
        retry limit: the sender's timer still runs from its last acknowledgement."""
        if self._busy:  # frames are dropped now; the sender holds and polls
            return
        for seq, (at, wait) in list(self._asked.items()):
            if wait and self._now >= at + wait:
                self.counters["reasks"] += 1
                self._ask(seq, 2 * wait if 2 * wait < self._timeout() else 0.0)

    def _accept(self, body: bytes) -> None:
        self._asked.pop(self._rx_next, None)
        self._rx_next = (self._rx_next + 1) & 0xFF
        self._rejected_at = None
        self._queued = self._rx_next
        self._events.append(MessageReceived(body))


def _image_ok(body: bytes, maxmsg: int) -> bool:
    try:
        decode(body, maxmsg)
        return True
    except ImageError:
        return False
