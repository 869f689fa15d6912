"""The sending side of a BSC station: bidding for the line and transmitting blocks (docs/DESIGN.md
4.2). A part of BscLine (a mixin): it uses the machine's output (_tx, _retry, _events) and
queue. Which answer does what in which phase is data: the tables at the end of this module, keyed
by bsc_states' enums, name the handlers.
"""
from __future__ import annotations

from typing import Callable

from .bsc_base import BscBase
from .bsc_signon import BscSignOn
from .bsc_states import BidAnswer, Phase, Reply, State
from .events import MessageAcked

ACK = ("ACK0", "ACK1")
#: How long a transmission is held for more (Phase.HOLD) when the peer has asked for the line
#: (we answered its blocks RVI, so it gave the line up with messages of its own still waiting):
#: long enough for our owner to hand over the next image of a run, no longer, then EOT.
HANDOVER = 0.05


class BscSender(BscBase):
    """Bidding and transmitting; see bsc_states for the tables."""

    def _reset_sender(self) -> None:
        self._phase: Phase | None = None  # in BID and XMIT: what we wait for
        self._heard: str | None = None    # phase ENQ: the positive answer heard once
        self._deadline: float | None = None
        self._retries = 0
        self._frames: list[tuple[bytes, bool]] | None = None  # texts of the head image's blocks while it is sent
        self._block = 0          # which of them is in flight
        self._sent_max = -1      # the highest block of the head image sent so far
        self._parity = 1         # ACK1 or ACK0 expected for the block in flight
        self._sent = 0           # blocks sent in this transmission
        self._rvi = False        # the peer asked for the line: EOT after this message (and any more urgent)
        self._acked_priority = 0  # the priority of the last image acknowledged
        self._holdoff = 0.0      # after RVI, leave the next bid to the peer until then (or its bid)
        self._peer_waits = False # we answered RVI: the peer gave up the line with messages waiting

    # --- bidding --------------------------------------------------------------------------
    def _bid(self, now: float) -> None:
        self.counters["bids"] += 1
        self._state, self._phase = State.BID, Phase.BID
        self._expect_reply(now, self._tx("ENQ"))

    def _on_bid_reply(self, kind: str, now: float) -> None:
        if self._phase in ON_BID_REPLY and kind in BidAnswer.__members__:
            handler = ON_BID_REPLY[self._phase][BidAnswer(kind)]
            if handler is not IGNORED:
                handler(self, kind, now)

    def _bids_crossed(self, kind: str, now: float) -> None:
        # Both bid: the secondary yields and answers; the primary bids again after its shorter timeout.
        self.counters["collisions"] += 1
        if not self.primary:
            self._yield(kind, now)

    def _yield(self, kind: str, now: float) -> None:
        # Also a primary that is only pausing before its next bid (its last one was answered WACK or NAK).
        self._reset_sender()
        self._state = State.CONTROL
        self._answer_bid()

    def _bid_accepted(self, kind: str, now: float) -> None:
        self._begin_transmission(now)

    def _bid_naked(self, kind: str, now: float) -> None:
        if self._retry("bid answered NAK"):
            self._bid_deferred(kind, now)

    def _bid_deferred(self, kind: str, now: float) -> None:
        self._phase, self._deadline = Phase.PAUSE, now + self.pause

    def _peer_still_receiving(self, kind: str, now: float) -> None:
        # The peer still answers blocks: it missed our EOT. Send it again and bid anew.
        if self._retry(f"bid answered {kind}: peer still receiving"):
            self._tx("EOT")
            self._bid(now)

    # --- transmitting ---------------------------------------------------------------------
    def _begin_transmission(self, now: float, parity: int = 1) -> None:
        """We hold the line: the first block is answered ACK1 (ACK0 answered the bid), or ACK0
        when the proof block took the ACK1."""
        self._state, self._phase = State.XMIT, None
        self._parity, self._sent, self._retries, self._rvi = parity, 0, 0, False
        self._deadline = None
        self._next(now)

    def _next(self, now: float) -> None:
        """Send the next block, or hold the line for more, or end the transmission."""
        if self._frames is None:
            # after RVI the line goes to the peer once this message is done; an image of higher
            # priority than it, handed meanwhile (an urgent message), goes first
            if self._rvi and not (self._queue and self._priority[0] > self._acked_priority):
                self._finish(now, holdoff=True)
                return
            if not self._queue:
                if self._sent:  # more may be handed over any moment: hold the line for it
                    hold = HANDOVER if self._peer_waits else self.ttd_timeout
                    self._phase, self._deadline = Phase.HOLD, now + hold
                else:
                    self._finish(now)
                return
            self._frames = self.cs.texts(self._queue[0], self.block_size)
            self._block = self._first_block(self._frames)
        self._send_block(now)

    def _send_block(self, now: float) -> None:
        assert self._frames is not None  # the head image's blocks are being sent (_next set them)
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
        self._phase, self._heard = Phase.REPLY, None
        self._expect_reply(now, sent)

    def _finish(self, now: float, holdoff: bool = False) -> None:
        self._tx("EOT")
        self._state, self._phase, self._deadline = State.CONTROL, None, None
        self._peer_waits = False
        self._holdoff = now + self.reply_timeout if holdoff else 0.0

    def _enq(self, now: float) -> None:
        self.counters["enqs"] += 1
        self._expect_reply(now, self._tx("ENQ"))

    def _end_transmission(self) -> None:
        self._state, self._phase, self._deadline = State.CONTROL, None, None
        self._frames = None

    # --- answers to blocks ----------------------------------------------------------------
    def _on_reply(self, kind: str, now: float) -> None:
        phase = self._phase
        reply = (Reply.ACK if kind == ACK[self._parity] else Reply.OLD_ACK) if kind in ACK else \
            Reply(kind) if kind in ("RVI", "WACK", "NAK", "EOT") else None
        if phase is Phase.ENQ and kind == "ACK0" and reply is Reply.ACK:
            # ACK0 is also the answer to a bid: a receiver that took our ENQ for EOT (one bit in
            # ASCII) answers the next ENQ so. End the transmission and send the message again
            # in a new one (kick() bids at once): a receiver that has it already answers it
            # without reporting it twice.
            if self._retry("ACK0 to ENQ is ambiguous"):
                self._tx("EOT")
                self._end_transmission()
            return
        if phase is Phase.ENQ and reply in (Reply.ACK, Reply.RVI, Reply.WACK) and kind != self._heard:
            # A positive answer to ENQ is taken only when heard twice running: one bit turns
            # the ASCII ACK0 into ACK1, and the previous ACK read as this one would lose the block.
            if self._heard is None or self._retry("answers to ENQ differ"):
                self._heard = kind
                self._enq(now)
            return
        if phase in ON_REPLY and reply is not None:
            handler = ON_REPLY[phase][reply]
            if handler is not IGNORED:
                handler(self, kind, now)

    def _acked(self, kind: str, now: float, wack: bool = False) -> None:
        self._retries = 0
        self._parity ^= 1
        self._block += 1
        assert self._frames is not None  # phase REPLY or ENQ: a block of the head image is in flight
        if self._block == len(self._frames):
            self._frames, self._sent_max = None, -1
            self._acked_priority = self._priority.popleft()
            self._events.append(MessageAcked(self._queue.popleft()))
        if wack:
            self._phase, self._deadline = Phase.WACK, now + self.pause
        else:
            self._next(now)

    def _acked_rvi(self, kind: str, now: float) -> None:
        self._rvi = True
        self._acked(kind, now)

    def _acked_wack(self, kind: str, now: float) -> None:
        self._acked(kind, now, wack=True)

    def _naked(self, kind: str, now: float) -> None:
        self.counters["naks"] += 1
        if self._retry("block answered NAK"):
            self._send_block(now)

    def _ask_again(self, kind: str, now: float) -> None:
        # The previous block's ACK: ask again, and if it stays (_block_lost), send the block again.
        if self._retry("wrong ACK"):
            self._phase = Phase.ENQ
            self._enq(now)

    def _block_lost(self, kind: str, now: float) -> None:
        if self._retry("block lost"):
            self._send_block(now)

    def _receiver_ended(self, kind: str, now: float) -> None:
        self._end_transmission()  # the receiver ended the transmission: the message goes again whole

    def _wack_cleared(self, kind: str, now: float) -> None:
        self._retries = 0
        self._next(now)

    def _wacked_again(self, kind: str, now: float) -> None:
        self._phase, self._deadline = Phase.WACK, now + self.pause

    def _ttd_answered(self, kind: str, now: float) -> None:
        self._retries = 0
        if self._queue:
            self._next(now)
        else:
            self._finish(now)

    # --- timers ---------------------------------------------------------------------------
    def _on_timer(self, now: float) -> None:
        if self._state is State.SIGNON:
            self._signon_overdue(now)
        elif self._state in (State.BID, State.XMIT) and self._phase is not None:
            ON_TIMER[self._phase](self, now)

    def _bid_unanswered(self, now: float) -> None:
        self._timeout("no answer to bid")
        if self._retry("bid again"):
            self._bid(now)

    def _hold_over(self, now: float) -> None:
        if self._queue:
            self._next(now)
            return
        if self._peer_waits:  # the line goes back to the peer that asked for it at once, no TTD
            self._finish(now)
            return
        self.counters["ttds"] += 1
        self._phase = Phase.TTD
        self._expect_reply(now, self._tx("TTD"))

    def _ttd_unanswered(self, now: float) -> None:
        self._timeout("no answer to TTD")
        self._finish(now)

    def _wack_over(self, now: float) -> None:
        self._phase = Phase.WACKENQ
        self._enq(now)

    def _reply_overdue(self, now: float) -> None:
        """REPLY, ENQ, WACKENQ: ask for the answer again."""
        self._timeout(f"no answer ({self._phase})")
        if self._retry("ENQ for the reply"):
            if self._phase is Phase.REPLY:
                self._phase = Phase.ENQ
            self._enq(now)


# --- the tables (bsc_states' docstring draws them) -------------------------------------------------
Answered = Callable[..., None]  # handler(station, kind received, now): a BscSender or BscSignOn method
IGNORED = None  # an answer that means nothing in that phase: dropped, explicitly

#: ON_REPLY's handlers, the replies not named here IGNORED (a table of its own, typed: its rows
#: name methods of two parts, BscSignOn and BscSender).
_XMIT_HANDLERS: dict[Phase, dict[Reply, Answered]] = {
    Phase.AUTH: {Reply.ACK: BscSignOn._proven, Reply.NAK: BscSignOn._proof_naked},
    Phase.REPLY: {Reply.ACK: BscSender._acked, Reply.RVI: BscSender._acked_rvi, Reply.WACK: BscSender._acked_wack,
                  Reply.NAK: BscSender._naked, Reply.EOT: BscSender._receiver_ended,
                  Reply.OLD_ACK: BscSender._ask_again},
    Phase.ENQ: {Reply.ACK: BscSender._acked, Reply.RVI: BscSender._acked_rvi, Reply.WACK: BscSender._acked_wack,
                Reply.NAK: BscSender._naked, Reply.EOT: BscSender._receiver_ended,
                Reply.OLD_ACK: BscSender._block_lost},
    Phase.WACK: {Reply.OLD_ACK: BscSender._wack_cleared, Reply.WACK: BscSender._wacked_again},
    Phase.WACKENQ: {Reply.OLD_ACK: BscSender._wack_cleared, Reply.WACK: BscSender._wacked_again},
    Phase.HOLD: {},  # no block in flight: nothing is an answer
    Phase.TTD: {Reply.NAK: BscSender._ttd_answered},
}
#: XMIT: phase -> reply to the block in flight -> handler. Every phase of XMIT, every reply.
ON_REPLY: dict[Phase, dict[Reply, Answered | None]] = {
    phase: {reply: IGNORED for reply in Reply} | handlers for phase, handlers in _XMIT_HANDLERS.items()}

#: BID: phase -> control sequence received -> handler. Both phases of BID, every answer.
ON_BID_REPLY: dict[Phase, dict[BidAnswer, Answered | None]] = {
    phase: {answer: IGNORED for answer in BidAnswer} | handlers for phase, handlers in {
        Phase.BID: {BidAnswer.ENQ: BscSender._bids_crossed, BidAnswer.ACK0: BscSender._bid_accepted,
                    BidAnswer.WACK: BscSender._bid_deferred, BidAnswer.NAK: BscSender._bid_naked,
                    BidAnswer.ACK1: BscSender._peer_still_receiving, BidAnswer.RVI: BscSender._peer_still_receiving},
        Phase.PAUSE: {BidAnswer.ENQ: BscSender._yield},
    }.items()}

#: BID and XMIT: phase -> handler(station, now) when its timer runs out. Every phase.
ON_TIMER: dict[Phase, Callable[..., None]] = {
    Phase.BID: BscSender._bid_unanswered, Phase.PAUSE: BscSender._bid, Phase.AUTH: BscSignOn._proof_unanswered,
    Phase.REPLY: BscSender._reply_overdue, Phase.ENQ: BscSender._reply_overdue,
    Phase.WACKENQ: BscSender._reply_overdue, Phase.WACK: BscSender._wack_over, Phase.HOLD: BscSender._hold_over,
    Phase.TTD: BscSender._ttd_unanswered,
}
