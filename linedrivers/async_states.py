"""The states of an async line and what its reply timer waits for, as types; the sign-on as a
table (in the spirit of h11's _state.py): drawn here, as data at the end of async_signon.py.

A sign-on frame received, by state (SESSION: the one in the frame; a secret on both ends, else
the first row of each cell):

    got  DOWN / SIGNING_ON            VERIFYING (a secret)        UP
    S    no secret: UP, answer T      same SESSION: T again       same SESSION: T again;
         secret: answer T, VERIFYING  new: answer T afresh        new: DOWN ("peer restarted"), answer
         (both signing on: the end
         with the lower host id answers)
    T    ours (SIGNING_ON): UP        ignored                     ours, with a secret: V again
         (secret: proof good -> V)
    V    ignored                      proof good: UP, else refuse ignored
    O    REFUSED: DOWN ("refused")    REFUSED: DOWN               DOWN ("peer signed off" or "refused")

A sign-on from a host other than the configured peer, one without authentication on a line with
a secret, or one with it on a line without, is refused with O; so is a bad proof (T or V).
"""
from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    DOWN = "DOWN"
    SIGNING_ON = "SIGNING_ON"  # our S is out
    VERIFYING = "VERIFYING"    # with a secret: we answered an S with T and wait for V
    UP = "UP"


class SignOnKind(StrEnum):
    """The frames of signing on and off."""
    S = "S"  # a sign-on
    T = "T"  # its answer
    V = "V"  # with a secret: the proof of the end that sent S
    O = "O"  # a sign-off or a refusal  # noqa: E741 (named for its wire letter, like S, T and V)


class Await(StrEnum):
    """What the reply timer waits for (named by the frame kind it answers)."""
    SIGNON = "S"  # T, the answer to our S
    PROOF = "T"   # V, the answer to our T
    DATA = "D"    # the acknowledgement of data frames
    POLL = "P"    # any frame, after P


#: Why the line goes DOWN when the retries of each run out.
GIVE_UP = {Await.SIGNON: "no answer", Await.PROOF: "no answer", Await.DATA: "retry limit",
           Await.POLL: "dead line"}
