"""The states and phases of a BSC station, and what each answer does in each phase (in the
spirit of h11's _state.py). The tables themselves are data keyed by these enums, at the end of
bsc_sender.py, next to the handlers they name; a test checks that every (phase, answer) pair is
either handled or marked ignored.

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


class BidAnswer(StrEnum):
    """A control sequence that may answer a bid (any other sequence in BID is not an answer)."""
    ENQ = "ENQ"
    ACK0 = "ACK0"
    ACK1 = "ACK1"
    WACK = "WACK"
    NAK = "NAK"
    RVI = "RVI"
    EOT = "EOT"
