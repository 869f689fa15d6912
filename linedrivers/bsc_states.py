"""The states and phases of a BSC station, and what each answer does in each phase, as data
(in the spirit of h11's _state.py); the handlers the tables name are BscSender's methods.

States (BscLine.state):

    DOWN     not signed on; still answers a sign-on
    SIGNON   our ID ENQ is out
    CONTROL  signed on, nobody transmitting (contention)
    BID      our ENQ is out                           phases: BID, PAUSE
    XMIT     we hold the line                         phases: AUTH, REPLY, ENQ, WACK, WACKENQ, HOLD, TTD
    RECV     the peer holds it (until EOT, DLE EOT or the disconnect timeout)

A reply to a block is read against the block in flight (Reply): ACK is the ACK0/ACK1 that
block earns, OLD_ACK the other one (the previous block's answer).

    XMIT phase  ACK              OLD_ACK           RVI          WACK         NAK            EOT
    AUTH        proven: UP       .                 .            .            proof again    .
    REPLY       next block       ENQ (phase ENQ)   next, EOT    pause: WACK  block again    transmission over
    ENQ *       next block       block again       next, EOT    pause: WACK  block again    transmission over
    WACK        .                go on             .            pause again  .              .
    WACKENQ     .                go on             .            pause again  .              .
    TTD         .                .                 .            .            go on or EOT   .

    * in ENQ a positive answer counts only when heard twice running, and an ACK0 that would be
      the block's answer is ambiguous (it also answers a bid): EOT, and the message goes again.

    BID phase   ENQ                        ACK0             WACK    NAK           ACK1 / RVI
    BID         collision: the secondary   transmit         pause   pause (retry) peer still receiving:
                yields and answers                                                EOT, bid again
    PAUSE       yield and answer           .                .       .             .

    timer:  BID: bid again (a retry)   PAUSE: bid   AUTH: proof block again   REPLY, ENQ, WACKENQ: ENQ
            WACK: ENQ (phase WACKENQ)   HOLD: next block, or TTD (EOT when the peer
            asked for the line by RVI: then HOLD lasts only bsc_sender.HANDOVER)   TTD: EOT

(`.`: ignored. Every retry counts against the retry limit; past it the line goes DOWN.)
"""
from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    DOWN = "DOWN"
    SIGNON = "SIGNON"
    CONTROL = "CONTROL"
    BID = "BID"
    XMIT = "XMIT"
    RECV = "RECV"


#: Signed on (BscLine also checks that no authenticated sign-on is still under way).
UP_STATES = frozenset((State.CONTROL, State.BID, State.XMIT, State.RECV))


class Phase(StrEnum):
    """What a station in BID or XMIT waits for."""
    BID = "bid"          # BID: the answer to our ENQ
    PAUSE = "pause"      # BID: the time to bid again (after WACK or NAK)
    AUTH = "auth"        # XMIT: the answer to our proof block (with a secret)
    REPLY = "reply"      # XMIT: the answer to a block
    ENQ = "enq"          # XMIT: the answer to ENQ, asking for the block's answer again
    WACK = "wack"        # XMIT: the pause after WACK
    WACKENQ = "wackenq"  # XMIT: the answer to ENQ after that pause
    HOLD = "hold"        # XMIT: more messages, before TTD
    TTD = "ttd"          # XMIT: the answer (NAK) to TTD


class Reply(StrEnum):
    """A reply to a block, read against the block in flight."""
    ACK = "ack"
    OLD_ACK = "old ack"
    RVI = "RVI"
    WACK = "WACK"
    NAK = "NAK"
    EOT = "EOT"


_POSITIVE = {Reply.ACK: "_acked", Reply.RVI: "_acked_rvi", Reply.WACK: "_acked_wack",
             Reply.NAK: "_naked", Reply.EOT: "_receiver_ended"}
_WACKED = {Reply.OLD_ACK: "_wack_cleared", Reply.WACK: "_wacked_again"}

#: XMIT: phase -> reply -> handler(kind, now).
ON_REPLY: dict[Phase, dict[Reply, str]] = {
    Phase.AUTH: {Reply.ACK: "_proven", Reply.NAK: "_proof_naked"},
    Phase.REPLY: {**_POSITIVE, Reply.OLD_ACK: "_ask_again"},
    Phase.ENQ: {**_POSITIVE, Reply.OLD_ACK: "_block_lost"},
    Phase.WACK: _WACKED,
    Phase.WACKENQ: _WACKED,
    Phase.TTD: {Reply.NAK: "_ttd_answered"},
}

#: BID: phase -> received kind -> handler(kind, now).
ON_BID_REPLY: dict[Phase, dict[str, str]] = {
    Phase.BID: {"ENQ": "_bids_crossed", "ACK0": "_bid_accepted", "WACK": "_bid_deferred",
                "NAK": "_bid_naked", "ACK1": "_peer_still_receiving", "RVI": "_peer_still_receiving"},
    Phase.PAUSE: {"ENQ": "_yield"},
}

#: BID and XMIT: phase -> handler(now) when its timer runs out.
ON_TIMER: dict[Phase, str] = {
    Phase.BID: "_bid_unanswered", Phase.PAUSE: "_bid", Phase.AUTH: "_proof_unanswered",
    Phase.REPLY: "_reply_overdue", Phase.ENQ: "_reply_overdue", Phase.WACKENQ: "_reply_overdue",
    Phase.WACK: "_wack_over", Phase.HOLD: "_hold_over", Phase.TTD: "_ttd_unanswered",
}
