"""IBM binary synchronous (BSC, bisync) point-to-point contention line, sans-I/O.

The interface and events are those of docs/DESIGN.md section 4.0; the procedure is section 4.2:
the stations identify once (ID ENQ / ID ACK0), then bid for the line with ENQ whenever one has
messages, send every queued message as transparent blocks, each answered with the alternating
ACK0/ACK1 (WACK when the receiver has no room, RVI when it wants the line), and give the line
back with EOT. The receiving station stays in receive state until EOT, DLE EOT or the
disconnect timeout, so an ENQ that asks it to repeat its reply is never taken for a bid.

The machine is put together from parts, one module each: bsc_states (the states, phases and
what each answer does in each phase, as tables), bsc_signon (identification and, with a secret,
authentication: docs/PROTOCOL.md), bsc_agree (features and resume at sign-on), bsc_sender (bidding,
transmitting), bsc_receiver (receive
state), bsc_base (what they share, declared for the type checker); bsc_codes and bsc_reader are
the wire. Here: the interface, output and dispatch.
"""
from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Iterable

from .auth import TRAILER_SIZE, FrameAuth, Handshake
from .bsc_agree import BscAgreement
from .bsc_codes import AUTH_MAX_ID, CODE_SETS, MAX_ID
from .bsc_reader import BscReader, Seq
from .bsc_receiver import BscReceiver
from .bsc_sender import BscSender
from .bsc_signon import BscSignOn
from .bsc_states import UP_STATES, Phase, State
from .events import Event, FrameTraced, LineDown, LineEvent, LineUp
from .ids import check_host_id
from .image import HEADER_SIZE, key_of

#: Images the machine takes ahead of the line (room()): the one in flight. The next is handed in the
#: pass its ACK makes, while the transmission is held (Phase.HOLD), so the line loses no bid, and
#: everything else waits on SEND_LIST, where a message of higher priority can overtake it.
QUEUE_LIMIT = 1
#: How the trace names a received sequence (a text block is named by its ending).
TRACE_KIND = {"ID_ENQ": "ID", "ID_ACK0": "ID", "ID_NAK": "ID", "ABORT": "ETX"}
ID_KINDS = ("ID_ENQ", "ID_ACK0", "ID_NAK")
#: Sequences that carry no authentication trailer (bsc_agree's commit block binds the announcement).
UNSEALED = (*ID_KINDS, "FEAT")
#: A segment image (segment_size()) holds about this many seconds of the line, in full blocks (at
#: least two): each segment costs a commit before its last answer (2.5 to 7 ms here), and a
#: receiver killed in a segment loses what it had of it, so both are fixed in line time.
SEGMENT_SECONDS = 5.0
#: Seconds of a block's last bytes not waited for by a gather (bytes_wanted): they come at once,
#: while a gather that ends late (the loop's timers fire up to a ms late; a virtual or USB port
#: hands bytes over in ticks) delays the answer, which a stop-and-wait line waits for: 54 against
#: 56 blocks a second at 115200 baud (BENCHMARKS.md, issue 15).
READ_EARLY = 0.002

#: Beyond the common ones: bids, collisions (ENQ met ENQ), enqs (asking for a reply again),
#: wacks / rvis / ttds (sent), bad_sequences, oversized (blocks), bad_messages (wrong LENGTH),
#: bad_ids (a wrong ID met once, taken for noise), auth_failures (a trailer that did not pass),
#: resumed_blocks (blocks not sent again, since the peer held them from before a line drop).
COUNTERS = ("frames_tx", "frames_rx", "bytes_tx", "bytes_rx", "retransmissions", "naks", "timeouts",
            "crc_errors", "garbage", "duplicates", "signons", "bids", "collisions", "enqs",
            "wacks", "rvis", "ttds", "bad_sequences", "oversized", "bad_messages", "bad_ids",
            "auth_failures", "resumed_blocks")


class BscLine(BscSignOn, BscAgreement, BscSender, BscReceiver):
    """One end of a BSC line. Time is always passed in; nothing here blocks or reads a clock."""

    def __init__(self, local: str, peer: str, *, role: str = "primary", code: str = "ebcdic",
                 block_size: int = 256, baud: int = 9600, max_message: int = 128,
                 reply_timeout: float = 3.0, retry_limit: int = 7, disconnect_timeout: float = 20.0,
                 ttd_timeout: float = 2.0, secret: bytes | None = None, features: Iterable[str] = (),
                 large: int = 0, random_bytes: Callable[[int], bytes] = secrets.token_bytes):
        if role not in ("primary", "secondary"):
            raise ValueError(f"BSC role must be 'primary' or 'secondary', not {role!r}")
        if code not in CODE_SETS:
            raise ValueError(f"BSC code must be one of {sorted(CODE_SETS)}, not {code!r}")
        if block_size < 2 or baud <= 0 or reply_timeout <= 0 or retry_limit < 0:
            raise ValueError("BSC block_size must be at least 2, baud and reply_timeout positive, retry_limit >= 0")
        if secret is not None and not secret:
            raise ValueError("an empty secret")
        self.local, self.peer = check_host_id(local), check_host_id(peer)
        self.random_bytes = random_bytes  # nonces: secrets by default, seeded in tests
        self.primary = role == "primary"
        self.cs = cs = CODE_SETS[code]
        self.block_size, self.baud, self.retry_limit = block_size, baud, retry_limit
        self.max_image = HEADER_SIZE + max_message
        # The primary waits less, so after a collision it bids again first (docs/DESIGN.md 4.2).
        self.reply_timeout = reply_timeout * (0.9 if self.primary else 1.0)
        self.pause = reply_timeout / 3          # before bidding again after WACK/NAK, or ENQ after WACK
        self.gap_timeout = reply_timeout / 2    # silence inside a block: the block is lost
        self.disconnect_timeout, self.ttd_timeout = disconnect_timeout, ttd_timeout
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.secret = secret
        # Offered at sign-on (bsc_agree); a station offering nothing signs on as version 1.
        self.features, self.large = frozenset(features), large
        self.offers = bool(self.features) or large > 0
        self._feat_heard: bytes | None = None  # the announcement just received, for the ID after it
        self._agreeing: bytes | None = None   # the peer's announcement, until the commit block settles it
        self._said = b""                      # our announcement of this sign-on
        self._agreed = False                  # this sign-on agreed (LineUp had the features)
        self._limit = self.max_image          # the longest image: ours, or the peer's if smaller
        self._held: tuple[bytes, int] | None = None     # receiver: blocks of an image from before a drop
        self._resume: tuple[bytes, int] | None = None   # sender: an image and where to go on with it
        self._hello: tuple[bytes, str] = (b"", "")      # the sign-on block in phase AUTH, and its trace kind
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
        self._events: list[Event] = []
        self._now = self._last_rx = 0.0
        self._state = State.DOWN
        self._busy = False
        self._queue: deque[bytes] = deque()  # every image held, the one in flight first
        self._priority: deque[int] = deque()  # the priority of each, as send() was told
        self._unconfirmed = False            # a MessageReceived waits for confirm()
        self._last_block: Seq | None = None  # the last block taken (duplicates)
        self._suspect: tuple[str, str] | None = None  # a wrong ID met once, and why (see _refuse)
        self._reset_sender()
        self._reset_receiver()

    # --- the interface of docs/DESIGN.md 4.0 ---------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    def start(self, now: float) -> None:
        """Sign on: send ID ENQ (a no-op unless DOWN)."""
        self._now = now
        if self._state is State.DOWN:
            self._state, self._retries = State.SIGNON, 0
            self._send_id_enq(now)

    def stop(self, now: float) -> None:
        """Sign off with DLE EOT; every image held is handed back in LineDown."""
        self._now = now
        if self._state is not State.DOWN:
            self._tx("DISC")
            self._down("stopped")

    def send(self, image: bytes, priority: int = 0) -> None:
        """Queue one image; it goes in the next transmission (see next_deadline()), before the
        images of lower priority not yet begun. room() takes one at a time, so that the rest waits
        on SEND_LIST, where priority orders it; an owner may still hand one of higher priority
        beyond room() (mccs.core.lines does): it need not wait behind the image held here, which
        may wait a whole turn of the line to the peer before its first block."""
        if len(image) > self._limit:
            raise ValueError(f"image of {len(image)} bytes is over this line's {self._limit}")
        begun = 0 if self._frames is None else 1  # the head's blocks are going: it stays the head
        at = next((i for i in range(begun, len(self._queue)) if self._priority[i] < priority), len(self._queue))
        self._queue.insert(at, bytes(image))
        self._priority.insert(at, priority)

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

    def bytes_wanted(self) -> int:
        """A guess, since a block's length is known only at its end (ETB or ETX): inside a block, as
        many bytes as make it as long as the last one (BscReader.wanted), less READ_EARLY's worth.
        The shell lets them gather and hands them over in one read instead of one every few bytes;
        a shorter block is read that much later, at most the daemon's GUESS_WAIT (mccs.core.lines)."""
        return max(1, self._reader.wanted() - int(self.baud / 10 * READ_EARLY))

    def unconfirmed_room(self) -> int:
        """0: the peer sends nothing more before the answer to its block."""
        return 0

    def data_to_send(self, now: float | None = None) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def events(self) -> list:
        ev, self._events = self._events, []
        return ev

    def next_deadline(self) -> float | None:
        """The earliest timer; the current time when queued work waits to go out."""
        times = [] if self._deadline is None else [self._deadline]
        if self._state is State.RECV:
            times.append(self._last_rx + self.disconnect_timeout)
        if self._reader.mid_frame:
            times.append(self._last_rx + self.gap_timeout)
        if self._queue:
            if self._state is State.CONTROL:
                times.append(max(self._holdoff, self._now))
            elif self._state is State.XMIT and self._phase is Phase.HOLD:
                times.append(self._now)
        return min(times) if times else None

    def handle_timeout(self, now: float) -> None:
        self._now = now
        self._check_gap(now)
        if self._state is State.RECV and now >= self._last_rx + self.disconnect_timeout:
            self._timeout("disconnect: no byte in receive state")
            if self._hs is not None or self._agreeing is not None:
                self._down("no answer")  # signing on: the peer never sent its proof or commit
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

    def next_write(self) -> float | None:
        """Nothing is paced on a BSC line (AsyncLine.next_write)."""
        return None

    def paced(self, now: float) -> bytes:
        return b""

    @property
    def receiving(self) -> bool:
        """The peer holds the line: an image handed now makes us ask for it (RVI), which turns
        the line round twice."""
        return self._state is State.RECV

    def room(self) -> int:
        up = self._state in UP_STATES and self._hs is None and self._agreeing is None
        return max(0, QUEUE_LIMIT - len(self._queue)) if up else 0

    def segment_size(self) -> int:
        """MESSAGE bytes the owner should put in one segment image: an image of as many full blocks
        as SEGMENT_SECONDS of the line carry (fewer if the agreed image limit is smaller). The ETB
        blocks are answered as their BCC checks, only the ETX block waits for confirm(), so long
        segments run at the stop-and-wait rate of single blocks and the per-segment cost (header,
        envelope, trailer, the commit before the last answer) is spread over many."""
        wanted = max(2 * self.block_size, int(self.baud / 10 * SEGMENT_SECONDS))
        size = min(wanted, self._limit) // self.block_size * self.block_size
        return (size if size > HEADER_SIZE else self._limit) - HEADER_SIZE

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
    def _up(self, agreed: bool = False) -> None:
        """Signed on; `agreed`: with the features both announced (bsc_agree), else as version 1."""
        self._reset_sender()
        self._last_block = None
        self.counters["signons"] += 1
        if agreed:
            self._events.append(self._agreement())
        else:
            self._agreeing, self._agreed, self._limit = None, False, self.max_image
            self._held = self._resume = None
            self._events.append(LineUp(self.peer))

    def _down(self, reason: str) -> None:
        self._keep_partial()
        self._events.append(LineDown(reason, list(self._queue)))
        self._queue.clear()
        self._priority.clear()
        self._state = State.DOWN
        self._hs = self._auth = self._agreeing = None
        self._agreed = False
        self._reset_sender()
        self._reset_receiver()

    def _kick(self, now: float) -> None:
        """Start the work queued images make: a bid, or the next block after a hold."""
        if self._queue:
            if self._state is State.CONTROL and now >= self._holdoff:
                self._bid(now)
            elif self._state is State.XMIT and self._phase is Phase.HOLD:
                self._next(now)

    def _check_gap(self, now: float) -> None:
        if self._reader.mid_frame and now >= self._last_rx + self.gap_timeout:
            for s in self._reader.abort():
                self._on_seq(s, now)

    # --- received sequences ---------------------------------------------------------------
    def _on_seq(self, s: Seq, now: float) -> None:
        heard, self._feat_heard = self._feat_heard, None  # an announcement counts only for the ID right after it
        if self.secret is not None and s.ok and s.kind not in UNSEALED and not self._authentic(s):
            self.counters["auth_failures"] += 1  # forged, replayed, or from before this session
            self._trace_rx(s._replace(ok=False))
            return
        self._trace_rx(s)
        kind, st = s.kind, self._state
        if not s.ok and kind in self.cs.bodies:
            return  # a control sequence whose trailer check failed: as if not heard
        if kind == "FEAT":
            self._feat_heard = s.data if s.ok else None
        elif kind == "DISC":
            if st is State.XMIT and self._phase is Phase.AUTH:
                self._down("refused: authentication failed")
            elif st not in (State.DOWN, State.SIGNON):
                refused = st is State.RECV and self._last_reply == "ID_ACK0"
                self._down("refused" if refused else "peer signed off")
        elif kind.startswith("ID_"):
            self._on_id(s, now, heard)
        elif st is State.XMIT and kind == "ENQ":
            # The peer bids: it has left receive state (it took a garbled ENQ for EOT), so
            # nothing it answers now is about our block. Give up this transmission unacknowledged
            # (the message goes again whole) and answer the bid as an idle station would.
            self.counters["collisions"] += 1
            self._end_transmission()
            self._answer_bid()
        elif st is State.XMIT:
            self._on_reply(kind, now)
        elif st is State.RECV:
            self._on_receiving(s)
        elif st is State.BID:
            self._on_bid_reply(kind, now)
        elif kind == "ENQ":
            if st is State.CONTROL:
                self._answer_bid()
            else:
                self._tx("NAK")  # DOWN or SIGNON: not signed on, identify first
