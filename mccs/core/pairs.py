"""End-to-end order and exactly-once across paths: numbers per (origin, destination, priority).

An origin numbers its messages for each destination host and priority 1, 2, 3, ... (PSEQ) when they first
leave on a routing line, under its checkpoint's epoch. The destination delivers PSEQ n only
after n-1: a message that overtook another on a shorter path is stored (it is acknowledged to
the previous hop like any other) but held back until the gap is filled; a PSEQ below the next
expected, or one already held, is a copy that came twice (a retransmission after a crash, or
two paths) and is dropped. Unlike the duplicate window of 16-bit MSG_IDs, this is exact.

A new epoch of an origin (its checkpoint was started afresh) starts its numbering again.

Each priority is a stream of its own, so that an urgent message that overtook bulk traffic on the
way is not held at the destination until the bulk has come: order is kept within a stream only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from checkpoint import changes as ch
from checkpoint.changes import Change

from mccs.core.lists import MSGBLOK


class Verdict(StrEnum):
    DELIVER = "deliver"  # in order: it, and any held ones after it, are ready for RECV
    HELD = "held"  # an earlier one is missing: stored, not yet visible
    DUPLICATE = "duplicate"


@dataclass
class PairIn:
    epoch: str
    expect: int = 1
    held: dict[int, MSGBLOK] = field(default_factory=dict)


class PairsOut:
    """This origin's next PSEQ per (destination host, priority)."""

    def __init__(self, next_by_dest: dict[tuple[str, int], int]):
        self.next = dict(next_by_dest)

    def number(self, dest: str, priority: int) -> tuple[int, list[Change]]:
        pseq = self.next.get((dest, priority), 1)
        self.next[dest, priority] = pseq + 1
        return pseq, [ch.set_pair_out(dest, priority, pseq + 1)]

    def restart(self, dest: str) -> list[Change]:
        """`dest` was started afresh: it expects 1 next, at every priority."""
        streams = [key for key in self.next if key[0] == dest]
        for key in streams:
            self.next[key] = 1
        return [ch.set_pair_out(d, p, 1) for d, p in streams]


class PairsIn:
    """Per (origin host, priority): its epoch, the next PSEQ to deliver, and what waits for a gap."""

    def __init__(self, state: dict[tuple[str, int], tuple[str, int]]):
        self.pairs = {stream: PairIn(epoch, expect) for stream, (epoch, expect) in state.items()}

    def renewed(self, origin: str, epoch: str) -> bool:
        """Does `epoch` say the origin was started afresh since its last numbered message here (on
        none of its streams yet)?"""
        epochs = {pair.epoch for (o, _), pair in self.pairs.items() if o == origin}
        return bool(epochs) and epoch not in epochs

    def is_held(self, blk: MSGBLOK) -> bool:
        """Restore: a stored block above its pair's next expected number is still held."""
        pair = self.pairs.get(blk.stream)
        if blk.pseq and pair is not None and pair.epoch == blk.epoch and blk.pseq >= pair.expect:
            pair.held[blk.pseq] = blk
            return True
        return False

    def arrive(self, blk: MSGBLOK) -> tuple[Verdict, list[MSGBLOK], list[Change]]:
        """The verdict on an arrival, and the blocks that become ready for RECV, in order."""
        pair = self.pairs.get(blk.stream)
        ready: list[MSGBLOK] = []
        created = pair is None or pair.epoch != blk.epoch
        if created:  # a new origin, or its checkpoint started afresh
            if pair is not None:
                ready = [pair.held[n] for n in sorted(pair.held)]
            pair = self.pairs[blk.stream] = PairIn(blk.epoch)
        if blk.pseq < pair.expect or blk.pseq in pair.held:
            return Verdict.DUPLICATE, ready, []
        pair.held[blk.pseq] = blk
        start = pair.expect
        while pair.expect in pair.held:
            ready.append(pair.held.pop(pair.expect))
            pair.expect += 1
        changes = [ch.set_pair_in(*blk.stream, pair.epoch, pair.expect)] if pair.expect != start or created else []
        return (Verdict.DELIVER if pair.expect > blk.pseq else Verdict.HELD), ready, changes

    def status(self) -> dict[str, dict]:
        """Per stream that waits for a gap: the origin, with its priority if not 0 (`AA`, `AA/p7`)."""
        return {f"{o}/p{n}" if n else o: {"next": p.expect, "held": len(p.held)}
                for (o, n), p in sorted(self.pairs.items()) if p.held}


@dataclass
class Pairs:
    """This host's epoch, its numbering as an origin, and its order as a destination."""
    epoch: str
    out: PairsOut
    into: PairsIn
