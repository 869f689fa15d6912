"""IBM binary synchronous (BSC, bisync) point-to-point contention line, sans-I/O.

The interface and events are those of DESIGN.md section 4.0; the procedure is section 4.2:
the stations identify once (ID ENQ / ID ACK0), then bid for the line with ENQ whenever one has
messages, send every queued message as transparent blocks, each answered with the alternating
ACK0/ACK1 (WACK when the receiver has no room, RVI when it wants the line), and give the line
back with EOT. The receiving station stays in receive state until EOT, DLE EOT or the
disconnect timeout, so an ENQ that asks it to repeat its reply is never taken for a bid.

States: DOWN (not signed on; still answers a sign-on), SIGNON (our ID ENQ is out), CONTROL
(signed on, nobody transmitting), BID (our ENQ is out), XMIT (we hold the line), RECV (the
peer holds it).

With a `secret` (docs/PROTOCOL.md) the IDs carry AUTH_MARK and the answering station's ID ACK0
its nonce; the bidder then sends, in phase "auth" of XMIT, a proof block (its nonce and proof)
that the answering station, still signing on in RECV, checks before it answers ACK1 and reports
LineUp; the bidder's LineUp comes with that ACK1, whose MAC proves the answering station. From
then on every block and control sequence carries a trailer (counter and MAC) that must pass.
Before a session key exists only NAK and DISC go without one (UNSIGNED), and are believed only
while signing on.
"""
from __future__ import annotations

from collections import deque

from .auth import (INITIATOR, NONCE_SIZE, PROOF_SIZE, TRAILER_SIZE, UNSIGNED, FrameAuth, Handshake,
                   new_nonce)
from .bsc_codes import AUTH_MAX_ID, CODE_SETS, MAX_ID
from .bsc_reader import BscReader, Seq
from .events import (FrameTraced, LineDown, LineEvent, LineUp, MessageAcked, MessageReceived,
                     PeerRefused)
from .ids import check_host_id
from .image import HEADER_SIZE, key_of

DOWN, SIGNON, CONTROL, BID, XMIT, RECV = "DOWN", "SIGNON", "CONTROL", "BID", "XMIT", "RECV"
UP_STATES = (CONTROL, BID, XMIT, RECV)
ACK = ("ACK0", "ACK1")
#: Images the machine takes ahead of the line (room()); all go in the next transmission.
QUEUE_LIMIT = 32
#: A receiver with messages of its own answers RVI once it has taken this many blocks in
#: one transmission, so two busy hosts take turns without a bid per message.
RVI_AFTER = 8
#: How the trace names a received sequence (a text block is named by its ending).
TRACE_KIND = {"ID_ENQ": "ID", "ID_ACK0": "ID", "ID_NAK": "ID", "ABORT": "ETX"}
ID_KINDS = ("ID_ENQ", "ID_ACK0", "ID_NAK")
#: The text of the proof block starts so; then the bidder's nonce and its proof.
PROOF_MAGIC = b"AUTH"
AUTH_FAILED = "failed authentication (a different secret, or a replayed sign-on)"

#: Beyond the common ones: bids, collisions (ENQ met ENQ), enqs (asking for a reply again),
#: wacks / rvis / ttds (sent), bad_sequences, oversized (blocks), bad_messages (wrong LENGTH),
#: bad_ids (a wrong ID met once, taken for noise), auth_failures (a trailer that did not pass).
COUNTERS = ("frames_tx", "frames_rx", "bytes_tx", "bytes_rx", "retransmissions", "naks", "timeouts",
            "crc_errors", "garbage", "duplicates", "signons", "bids", "collisions", "enqs",
            "wacks", "rvis", "ttds", "bad_sequences", "oversized", "bad_messages", "bad_ids",
            "auth_failures")


class BscLine:
    """One end of a BSC line. Time is always passed in; nothing here blocks or reads a clock."""

    def __init__(self, local: str, peer: str, *, role: str = "primary", code: str = "ebcdic",
                 block_size: int = 256, baud: int = 9600, max_message: int = 128,
                 reply_timeout: float = 3.0, retry_limit: int = 7, disconnect_timeout: float = 20.0,
                 ttd_timeout: float = 2.0, secret: bytes | None = None):
        if role not in ("primary", "secondary"):
            raise ValueError(f"BSC role must be 'primary' or 'secondary', not {role!r}")
        if code not in CODE_SETS:
            raise ValueError(f"BSC code must be one of {sorted(CODE_SETS)}, not {code!r}")
        if block_size < 2 or baud <= 0 or reply_timeout <= 0 or retry_limit < 0:
            raise ValueError("BSC block_size must be at least 2, baud and reply_timeout positive, retry_limit >= 0")
        if secret is not None and not secret:
            raise ValueError("an empty secret")
        self.local, self.peer = check_host_id(local), check_host_id(peer)
        self.primary = role == "primary"
        self.cs = cs = CODE_SETS[code]
        self.block_size, self.baud, self.retry_limit = block_size, baud, retry_limit
        self.max_image = HEADER_SIZE + max_message
        # The primary waits less, so after a collision it bids again first (DESIGN.md 4.2).
        self.reply_timeout = reply_timeout * (0.9 if self.primary else 1.0)
        self.pause = reply_timeout / 3          # before bidding again after WACK/NAK, or ENQ after WACK
        self.gap_timeout = reply_timeout / 2    # silence inside a block: the block is lost
        self.disconnect_timeout, self.ttd_timeout = disconnect_timeout, ttd_timeout
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.secret = secret
        self._seq = {k: cs.sequence(k) for k in cs.bodies}
        my_id = cs.encode_id(self.local)
        self._seq["ID_ENQ"] = cs.sequence("ENQ", cs.encode_id(self.local, secret is not None))
        self._seq["ID_ACK0"] = cs.sequence("ACK0", my_id)  # with a secret: per sign-on (_challenge)
        self._seq["ID_NAK"] = cs.sequence("NAK", my_id)
        trailer = TRAILER_SIZE if secret is not None else 0
        self._reader = BscReader(cs, max(block_size, self.max_image) + trailer, self.counters,
                                 trailer=trailer, max_id=AUTH_MAX_ID if trailer else MAX_ID)
        self._hs: Handshake | None = None   # with a secret: the sign-on under way
        self._auth: FrameAuth | None = None  # with a secret: the frame keys of the session
        self._out = bytearray()
        self._events: list = []
        self._now = self._last_rx = 0.0
        self._state = DOWN
        self._busy = False
        self._queue: deque[bytes] = deque()  # every image held, the one in flight first
        self._unconfirmed = False            # a MessageReceived waits for confirm()
        self._last_block: Seq | None = None  # the last block taken (duplicates)
        self._suspect: tuple[str, str] | None = None  # a wrong ID met once, and why (see _refuse)
        self._reset_sender()
        self._reset_receiver()

    # --- the interface of DESIGN.md 4.0 ---------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    def start(self, now: float) -> None:
        """Sign on: send ID ENQ (a no-op unless DOWN)."""
        self._now = now
        if self._state == DOWN:
            self._state, self._retries = SIGNON, 0
            self._send_id_enq(now)

    def stop(self, now: float) -> None:
        """Sign off with DLE EOT; every image held is handed back in LineDown."""
        self._now = now
        if self._state != DOWN:
            self._tx("DISC")
            self._down("stopped")

    def send(self, image: bytes) -> None:
        """Queue one image; it goes in the next transmission (see next_deadline())."""
        if len(image) > self.max_image:
            raise ValueError(f"image of {len(image)} bytes is over this line's {self.max_image}")
        self._queue.append(bytes(image))

    def receive_data(self, data: bytes, now: float) -> None:
        self._now = now
        if not data:
            return
        self.counters["bytes_rx"] += len(data)
        self._check_gap(now)
        self._last_rx = now
        for s in self._reader.feed(data):
            self._on_seq(s, now)
        self._kick(now)

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def events(self) -> list:
        ev, self._events = self._events, []
        return ev

    def next_deadline(self) -> float | None:
        """The earliest timer; the current time when queued work waits to go out."""
        times = [] if self._deadline is None else [self._deadline]
        if self._state == RECV:
            times.append(self._last_rx + self.disconnect_timeout)
        if self._reader.mid_frame:
            times.append(self._last_rx + self.gap_timeout)
        if self._queue:
            if self._state == CONTROL:
                times.append(max(self._holdoff, self._now))
            elif self._state == XMIT and self._phase == "hold":
                times.append(self._now)
        return min(times) if times else None

    def handle_timeout(self, now: float) -> None:
        self._now = now
        self._check_gap(now)
        if self._state == RECV and now >= self._last_rx + self.disconnect_timeout:
            self._timeout("disconnect: no byte in receive state")
            if self._hs is not None:
                self._down("no answer")  # signing on: the peer never sent its proof
            else:
                self._end_receive()
        if self._deadline is not None and now >= self._deadline:
            self._deadline = None
            self._on_timer(now)
        self._kick(now)

    def confirm(self) -> None:
        """The message reported is durable: its block may be answered now."""
        if self._unconfirmed:
            self._unconfirmed = False
            if self._reply_waits:
                self._reply_waits = False
                self._answer_block(final=True)

    def set_busy(self, flag: bool) -> None:
        """No room: answer WACK to blocks and bids until cleared."""
        self._busy = bool(flag)

    def room(self) -> int:
        up = self._state in UP_STATES and self._hs is None
        return max(0, QUEUE_LIMIT - len(self._queue)) if up else 0

    # --- output and events ----------------------------------------------------------------
    def _tx(self, kind: str, frame: bytes | None = None, *, trace: str | None = None,
            image: bytes | None = None, retransmit: bool = False) -> int:
        """Send a sequence (or `frame`); the bytes it took."""
        if frame is None and self.secret is not None and kind in self.cs.bodies:
            frame = self.cs.sequence(kind, trailer=self._seal(self.cs.bodies[kind]))
        frame = frame or self._seq[kind]
        self._out += frame
        c = self.counters
        c["frames_tx"] += 1
        c["bytes_tx"] += len(frame)
        origin, msg_id = key_of(image) if image is not None else (None, None)
        self._events.append(FrameTraced("tx", trace or TRACE_KIND.get(kind, kind), len(frame),
                                        True, None, origin, msg_id, retransmit))
        return len(frame)

    def _seal(self, content: bytes) -> bytes:
        return self._auth.seal(content) if self._auth is not None else UNSIGNED

    def _content(self, s: Seq) -> bytes:
        """What a sequence's MAC covers: a block's ending and text, or a control's characters."""
        if s.kind in ("ETB", "ETX"):
            return bytes([self.cs.etx if s.kind == "ETX" else self.cs.etb]) + s.data
        return self.cs.bodies[s.kind]

    def _authentic(self, s: Seq) -> bool:
        """With a secret: whether a good sequence's trailer passes. UNSIGNED NAK and DISC pass only
        while signing on; so does the proof block, which _proof_in checks with its proof."""
        if s.trailer == UNSIGNED and s.kind in ("NAK", "DISC"):
            return self._auth is None or self._hs is not None
        if self._auth is None:
            return self._hs is not None and s.kind == "ETX"
        return self._auth.check(self._content(s), s.trailer)

    def _trace_rx(self, s: Seq) -> None:
        self.counters["frames_rx"] += 1
        origin = msg_id = None
        if self._hs is not None and self._auth is None and s.kind == "ETX":
            self._events.append(FrameTraced("rx", "AUTH", s.nbytes, s.ok))
            return
        if s.ok and s.kind in ("ETB", "ETX"):
            head = self._assembly if self._assembly else s.data
            if len(head) >= 14:
                origin, msg_id = key_of(head)
        self._events.append(FrameTraced("rx", TRACE_KIND.get(s.kind, s.kind), s.nbytes, s.ok,
                                        None, origin, msg_id, False))

    def _timeout(self, detail: str) -> None:
        self.counters["timeouts"] += 1
        self._events.append(LineEvent("timeout", detail))

    def _retry(self, detail: str) -> bool:
        """Count a retry; past the limit the line goes DOWN (False)."""
        self._retries += 1
        if self._retries > self.retry_limit:
            self._tx("DISC")
            self._down(f"retry limit: {detail}")
            return False
        self._events.append(LineEvent("retry", detail))
        return True

    def _tx_time(self, nbytes: int) -> float:
        return nbytes * 10 / self.baud

    def _expect_reply(self, now: float, sent: int) -> None:
        """Wait for the answer to a sequence of `sent` bytes."""
        self._deadline = now + self._tx_time(sent + 8) + self.reply_timeout

    # --- line state -----------------------------------------------------------------------
    def _reset_sender(self) -> None:
        self._phase: str | None = None  # BID: bid/pause; XMIT: reply/enq/wack/wackenq/hold/ttd
        self._heard: str | None = None  # phase enq: the positive answer heard once
        self._deadline: float | None = None
        self._retries = 0
        self._frames: list[bytes] | None = None  # blocks of the head image while it is sent
        self._block = 0          # which of them is in flight
        self._sent_max = -1      # the highest block of the head image sent so far
        self._parity = 1         # ACK1 or ACK0 expected for the block in flight
        self._sent = 0           # blocks sent in this transmission
        self._rvi = False        # the peer asked for the line: EOT after this message
        self._holdoff = 0.0      # after RVI, leave the next bid to the peer until then

    def _reset_receiver(self) -> None:
        self._due = 1            # the ACK the next good block earns
        self._last_reply = "ACK0"
        self._assembly = bytearray()   # ETB blocks of the message coming in
        self._reply_waits = False      # the last block's answer waits for confirm()
        self._wack_ack: str | None = None  # after WACK: the ACK to give when no longer busy
        self._rx_blocks = 0
        self._rvi_sent = False
        self._block_reply: str | None = None  # the answer _last_block earned in this transmission

    def _up(self) -> None:
        self._reset_sender()
        self._last_block = None
        self.counters["signons"] += 1
        self._events.append(LineUp(self.peer))

    def _down(self, reason: str) -> None:
        self._events.append(LineDown(reason, list(self._queue)))
        self._queue.clear()
        self._state = DOWN
        self._hs = self._auth = None
        self._reset_sender()
        self._reset_receiver()

    def _kick(self, now: float) -> None:
        """Start the work queued images make: a bid, or the next block after a hold."""
        if self._queue:
            if self._state == CONTROL and now >= self._holdoff:
                self._bid(now)
            elif self._state == XMIT and self._phase == "hold":
                self._next(now)

    def _check_gap(self, now: float) -> None:
        if self._reader.mid_frame and now >= self._last_rx + self.gap_timeout:
            for s in self._reader.abort():
                self._on_seq(s, now)

    # --- received sequences ---------------------------------------------------------------
    def _on_seq(self, s: Seq, now: float) -> None:
        if self.secret is not None and s.ok and s.kind not in ID_KINDS and not self._authentic(s):
            self.counters["auth_failures"] += 1  # forged, replayed, or from before this session
            self._trace_rx(s._replace(ok=False))
            return
        self._trace_rx(s)
        kind, st = s.kind, self._state
        if not s.ok and kind in self.cs.bodies:
            return  # a control sequence whose trailer check failed: as if not heard
        if kind == "DISC":
            if st == XMIT and self._phase == "auth":
                self._down("refused: authentication failed")
            elif st not in (DOWN, SIGNON):
                refused = st == RECV and self._last_reply == "ID_ACK0"
                self._down("refused" if refused else "peer signed off")
        elif kind.startswith("ID_"):
            self._on_id(s, now)
        elif st == XMIT and kind == "ENQ":
            # The peer bids: it has left receive state (it took a garbled ENQ for EOT), so
            # nothing it answers now is about our block. Give up this transmission unacknowledged
            # (the message goes again whole) and answer the bid as an idle station would.
            self.counters["collisions"] += 1
            self._end_transmission()
            self._answer_bid()
        elif st == XMIT:
            self._on_reply(kind, now)
        elif st == RECV:
            self._on_receiving(s)
        elif st == BID:
            self._on_bid_reply(kind, now)
        elif kind == "ENQ":
            if st == CONTROL:
                self._answer_bid()
            else:
                self._tx("NAK")  # DOWN or SIGNON: not signed on, identify first

    def _answer_bid(self) -> None:
        if self._busy:
            self.counters["wacks"] += 1
            self._tx("WACK")
        else:
            self._enter_receive("ACK0")

    def _refuse(self, kind: str, who: str, why: str, down: str) -> None:
        """Refuse the ID `who` met in an ID ENQ (ID NAK) or in the ID ACK0 to our sign-on (DISC,
        and DOWN with `down`), but only when the same ID comes twice running for the same reason:
        IDs carry no BCC, and one bit error must not read as a stranger."""
        if (who, why) != self._suspect:
            self._suspect = (who, why)
            self.counters["bad_ids"] += 1
            return
        self._suspect = None
        self._events.append(PeerRefused(who, why))
        if kind == "ID_ENQ":
            self._tx("ID_NAK")
        elif self._state == SIGNON:
            self._tx("DISC")
            self._down(down)

    def _on_id(self, s: Seq, now: float) -> None:
        st = self._state
        if s.kind == "ID_NAK":  # the peer does not know us, whatever ID it gives
            if st == SIGNON:
                self._down("refused")
            return
        who, authenticates, nonce = self.cs.parse_id(s.data)
        if who != self.peer:
            self._refuse(s.kind, who, "", "wrong peer")
            return
        if authenticates != (self.secret is not None):
            if self.secret is not None:
                self._refuse(s.kind, who, "signed on without authentication, but this line has a secret",
                             "no authentication")
            else:
                self._refuse(s.kind, who, "asks for authentication, but this line has no secret", "no secret")
            return
        self._suspect = None
        if s.kind == "ID_ACK0":
            if st == SIGNON and self.secret is not None:
                self._prove(nonce, now)
            elif st == SIGNON:
                self._up()
                self._begin_transmission(now)
            elif st == BID and self.secret is None:
                self._begin_transmission(now)  # the ID ACK0 repeated for our bid
        elif st == SIGNON and self.primary:
            self.counters["collisions"] += 1  # both signing on: ours wins
        elif st == RECV and self._last_reply == "ID_ACK0":
            self._tx("ID_ACK0")  # our ID ACK0 was lost: repeat it
        else:
            if st in UP_STATES:
                self._down("peer restarted")
            if self.secret is not None:
                self._challenge()
            else:
                self._up()
                self._enter_receive("ID_ACK0")

    # --- authentication (with a secret) ---------------------------------------------------
    def _challenge(self) -> None:
        """Answer an ID ENQ with an ID ACK0 carrying our nonce; LineUp waits for the proof block."""
        self._reset_sender()
        self._hs = Handshake(self.secret, self.peer, self.local, responder_nonce=new_nonce())
        ident = self.cs.encode_id(self.local, True, self._hs.responder_nonce)
        self._seq["ID_ACK0"] = self.cs.sequence("ACK0", ident)
        self._enter_receive("ID_ACK0")

    def _prove(self, nonce: bytes, now: float) -> None:
        """The ID ACK0 to our sign-on, with the peer's nonce: send the proof block."""
        if len(nonce) != NONCE_SIZE:  # the nonce or its check was hit on the line: ask again later
            self.counters["bad_ids"] += 1
            return
        self._hs = Handshake(self.secret, self.local, self.peer, new_nonce(), nonce)
        self._auth = self._hs.frames(self.local)
        self._state, self._phase, self._retries = XMIT, "auth", 0
        self._send_proof(now)

    def _send_proof(self, now: float) -> None:
        text = PROOF_MAGIC + self._hs.initiator_nonce + self._hs.proof(INITIATOR)
        frame = self.cs.block(text + self._seal(bytes([self.cs.etx]) + text), True)
        self._expect_reply(now, self._tx("", frame, trace="AUTH"))

    def _proof_in(self, s: Seq) -> None:
        """The proof block, in RECV while signing on: a good one takes us UP, answered ACK1
        (whose MAC proves us); a bad one is refused with DISC."""
        text, n = s.data, len(PROOF_MAGIC)
        hs = self._hs.with_nonce(text[n:n + NONCE_SIZE])
        auth = hs.frames(self.local)
        if not (text[:n] == PROOF_MAGIC and len(text) == n + NONCE_SIZE + PROOF_SIZE
                and hs.verify(INITIATOR, text[n + NONCE_SIZE:]) and auth.check(self._content(s), s.trailer)):
            self._tx("DISC")
            self._events.append(PeerRefused(self.peer, AUTH_FAILED))
            self._down("authentication failed")
            return
        self._hs, self._auth = None, auth
        self._up()
        self._last_block = s
        self._answer_block(final=False)

    def _enter_receive(self, reply: str) -> None:
        self._state = RECV
        self._reset_receiver()
        self._reply(reply)

    def _end_receive(self) -> None:
        self._state = CONTROL
        self._reset_receiver()

    def _reply(self, kind: str) -> None:
        self._tx(kind)
        self._last_reply = kind

    def _on_receiving(self, s: Seq) -> None:
        kind = s.kind
        if kind == "ENQ":
            self._repeat_reply()
        elif kind in ("ETB", "ETX"):
            if self._reply_waits:
                return  # the sender must wait for our answer; it comes with confirm()
            if s.ok and self._hs is not None:
                self._proof_in(s)
            elif s.ok:
                self._on_block(s)
            else:
                self._reply("NAK")
        elif kind == "TTD":
            self._tx("NAK")
        elif kind == "EOT":
            self._end_receive()

    def _repeat_reply(self) -> None:
        """Answer ENQ: the last reply again (nothing while an answer waits for confirm())."""
        if self._reply_waits:
            return
        if self._wack_ack:
            if self._busy:
                self.counters["wacks"] += 1
                self._tx("WACK")
            else:
                self._reply(self._wack_ack)
                self._wack_ack = None
        else:
            self._tx(self._last_reply)

    def _on_block(self, s: Seq) -> None:
        """Take a good block. The same block again means the sender missed our answer (the
        sender never sends two equal blocks running, see CodeSet.blocks): answer, don't keep."""
        text = s.data
        last = self._last_block
        if last is not None and last.kind == s.kind and last.data == text:
            if self._block_reply:  # in this transmission: the answer it earned, whatever was said
                self.counters["duplicates"] += 1  # since; a stray that can only be a wrong ACK
                self._tx(self._block_reply)
                return
            if s.kind == "ETX" and not self._assembly:  # a message sent again in a new transmission
                self.counters["duplicates"] += 1
                if self._unconfirmed:
                    self._reply_waits = True
                else:
                    self._answer_block(final=True)
                return
        self._wack_ack = None
        self._rx_blocks += 1
        if len(self._assembly) + len(text) > self.max_image:
            self.counters["bad_messages"] += 1
            self._assembly.clear()
            self._reply("NAK")
        elif s.kind == "ETB":
            self._assembly += text
            self._last_block = s
            self._answer_block(final=False)
        else:
            image = bytes(self._assembly) + text if self._assembly else text
            self._assembly.clear()
            if len(image) < HEADER_SIZE or int.from_bytes(image[16:18], "big") != len(image) - HEADER_SIZE:
                self.counters["bad_messages"] += 1  # blocks lost or doubled: have it sent again
                self._reply("NAK")
                return
            self._last_block = s
            self._unconfirmed = self._reply_waits = True
            self._events.append(MessageReceived(image))

    def _answer_block(self, final: bool) -> None:
        ack = ACK[self._due]
        self._due ^= 1
        if final and self._busy:
            self.counters["wacks"] += 1
            self._reply("WACK")
            self._wack_ack = ack
        elif final and self._queue and not self._rvi_sent and self._rx_blocks >= RVI_AFTER:
            self.counters["rvis"] += 1
            self._rvi_sent = True
            self._reply("RVI")
        else:
            self._reply(ack)
        self._block_reply = "RVI" if self._last_reply == "RVI" else ack

    # --- bidding --------------------------------------------------------------------------
    def _send_id_enq(self, now: float) -> None:
        self._expect_reply(now, self._tx("ID_ENQ"))

    def _bid(self, now: float) -> None:
        self.counters["bids"] += 1
        self._state, self._phase = BID, "bid"
        self._expect_reply(now, self._tx("ENQ"))

    def _on_bid_reply(self, kind: str, now: float) -> None:
        if kind == "ENQ":
            # Both bid: the secondary yields and answers. So does a primary that is only
            # pausing before its next bid (its last one was answered WACK or NAK).
            if self._phase == "bid":
                self.counters["collisions"] += 1
            if self._phase == "pause" or not self.primary:
                self._reset_sender()
                self._state = CONTROL
                self._answer_bid()
            return
        if self._phase != "bid":
            return
        if kind == "ACK0":
            self._begin_transmission(now)
        elif kind in ("WACK", "NAK"):
            if kind == "NAK" and not self._retry("bid answered NAK"):
                return
            self._phase, self._deadline = "pause", now + self.pause
        elif kind in ("ACK1", "RVI"):
            # The peer still answers blocks: it missed our EOT. Send it again and bid anew.
            if self._retry(f"bid answered {kind}: peer still receiving"):
                self._tx("EOT")
                self._bid(now)

    # --- transmitting ---------------------------------------------------------------------
    def _begin_transmission(self, now: float, parity: int = 1) -> None:
        """We hold the line: the first block is answered ACK1 (ACK0 answered the bid), or ACK0
        when the proof block took the ACK1."""
        self._state, self._phase = XMIT, None
        self._parity, self._sent, self._retries, self._rvi = parity, 0, 0, False
        self._deadline = None
        self._next(now)

    def _next(self, now: float) -> None:
        """Send the next block, or hold the line for more, or end the transmission."""
        if self._frames is None:
            if self._rvi:
                self._finish(now, holdoff=True)
                return
            if not self._queue:
                if self._sent:  # more may be handed over any moment: hold the line for it
                    self._phase, self._deadline = "hold", now + self.ttd_timeout
                else:
                    self._finish(now)
                return
            self._frames, self._block = self.cs.texts(self._queue[0], self.block_size), 0
        self._send_block(now)

    def _send_block(self, now: float) -> None:
        text, last = self._frames[self._block]
        if self.secret is not None:  # each transmission its own counter, so it is built each time
            text += self._seal(bytes([self.cs.etx if last else self.cs.etb]) + text)
        again = self._block <= self._sent_max
        if again:
            self.counters["retransmissions"] += 1
        self._sent_max = max(self._sent_max, self._block)
        sent = self._tx("", self.cs.block(text, last), trace="ETX" if last else "ETB", image=self._queue[0],
                        retransmit=again)
        self._sent += 1
        self._phase, self._heard = "reply", None
        self._expect_reply(now, sent)

    def _finish(self, now: float, holdoff: bool = False) -> None:
        self._tx("EOT")
        self._state, self._phase, self._deadline = CONTROL, None, None
        self._holdoff = now + self.reply_timeout if holdoff else 0.0

    def _enq(self, now: float) -> None:
        self.counters["enqs"] += 1
        self._expect_reply(now, self._tx("ENQ"))

    def _acked(self, now: float, wack: bool = False) -> None:
        self._retries = 0
        self._parity ^= 1
        self._block += 1
        if self._block == len(self._frames):
            self._frames, self._sent_max = None, -1
            self._events.append(MessageAcked(self._queue.popleft()))
        if wack:
            self._phase, self._deadline = "wack", now + self.pause
        else:
            self._next(now)

    def _end_transmission(self) -> None:
        self._state, self._phase, self._deadline = CONTROL, None, None
        self._frames = None

    def _on_reply(self, kind: str, now: float) -> None:
        phase = self._phase
        if phase == "auth":  # the answer to the proof block (an ACK1 here has passed its MAC)
            if kind == "ACK1":
                self._hs = None
                self._up()
                self._begin_transmission(now, parity=0)
            elif kind == "NAK" and self._retry("proof block answered NAK"):
                self._send_proof(now)
            return
        if phase == "enq" and kind == "ACK0" == ACK[self._parity]:
            # ACK0 is also the answer to a bid: a receiver that took our ENQ for EOT (one bit in
            # ASCII) answers the next ENQ so. End the transmission and send the message again
            # in a new one (kick() bids at once): a receiver that has it already answers it
            # without reporting it twice.
            if self._retry("ACK0 to ENQ is ambiguous"):
                self._tx("EOT")
                self._end_transmission()
            return
        if phase == "enq" and kind in (ACK[self._parity], "RVI", "WACK") and kind != self._heard:
            # A positive answer to ENQ is taken only when heard twice running: one bit turns
            # the ASCII ACK0 into ACK1, and the previous ACK read as this one would lose the block.
            if self._heard is None or self._retry("answers to ENQ differ"):
                self._heard = kind
                self._enq(now)
            return
        if phase in ("reply", "enq"):
            if kind == ACK[self._parity]:
                self._acked(now)
            elif kind == "RVI":
                self._rvi = True
                self._acked(now)
            elif kind == "WACK":
                self._acked(now, wack=True)
            elif kind == "NAK":
                self.counters["naks"] += 1
                if self._retry("block answered NAK"):
                    self._send_block(now)
            elif kind in ACK:  # the previous block's ACK: ask again, and if it stays, resend
                if phase == "reply":
                    if self._retry("wrong ACK"):
                        self._phase = "enq"
                        self._enq(now)
                elif self._retry("block lost"):
                    self._send_block(now)
            elif kind == "EOT":  # the receiver ended the transmission: the message goes again whole
                self._end_transmission()
        elif phase in ("wack", "wackenq"):
            if kind == ACK[self._parity ^ 1]:
                self._retries = 0
                self._next(now)
            elif kind == "WACK":
                self._phase, self._deadline = "wack", now + self.pause
        elif phase == "ttd" and kind == "NAK":
            self._retries = 0
            if self._queue:
                self._next(now)
            else:
                self._finish(now)

    def _on_timer(self, now: float) -> None:
        st, phase = self._state, self._phase
        if st == SIGNON:
            self._timeout("no answer to ID ENQ")
            self._retries += 1
            if self._retries > self.retry_limit:
                self._down("no answer")
            else:
                self._events.append(LineEvent("retry", "ID ENQ again"))
                self._send_id_enq(now)
        elif st == BID:
            if phase != "pause":
                self._timeout("no answer to bid")
                if not self._retry("bid again"):
                    return
            self._bid(now)
        elif st != XMIT:
            return
        elif phase == "hold" and self._queue:
            self._next(now)
        elif phase == "hold":
            self.counters["ttds"] += 1
            self._phase = "ttd"
            self._expect_reply(now, self._tx("TTD"))
        elif phase == "ttd":
            self._timeout("no answer to TTD")
            self._finish(now)
        elif phase == "wack":
            self._phase = "wackenq"
            self._enq(now)
        elif phase == "auth":
            self._timeout("no answer to the proof block")
            if self._retry("proof block again"):
                self._send_proof(now)
        else:  # reply, enq, wackenq: ask for the answer again
            self._timeout(f"no answer ({phase})")
            if self._retry("ENQ for the reply"):
                if phase == "reply":
                    self._phase = "enq"
                self._enq(now)
