"""End-to-end order and exactly-once across paths: numbers per (origin, destination, priority).

An origin numbers its messages for each destination host and priority 1, 2, 3, ... (PSEQ) when they first
leave on a routing line, under its checkpoint's epoch. The destination delivers PSEQ n only
after n-1: a message that overtook another on a shorter path is stored (it is acknowledged to
the previous hop like any other) but held back until the gap is filled; a PSEQ below the next
expected, or one already held, is a copy that came twice (a retransmission after a crash, or
two paths) and is dropped. Unlike the duplicate window of 16-bit MSG_IDs, this is exact.

A new epoch of an origin (its checkpoint was started afresh) starts its numbering again, but in
the streams kept in custody across a restore from a backup, which keep the epoch they had.

A stream whose origin keeps custody copies (mccs.core.custody) is kept across a restore of its
destination from a backup: it is `syncing` until the origin's probe says which of the restored
messages were taken since, and from where the destination may go on.

A numbered message that came refused (mccs.core.e2e: altered or forged on the way) takes no place:
the genuine one with its number may still come. Its stream waits for it until a deadline (`gaps`,
[host] e2e_gap_wait at most, never past its ttl), then goes on without it (`due`).

Each priority is a stream of its own, so that an urgent message that overtook bulk traffic on the
way is not held at the destination until the bulk has come: order is kept within a stream only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable

from checkpoint import changes as ch
from checkpoint.changes import Change, Kept

from mccs.core.e2e import STORED
from mccs.core.lists import MSGBLOK

PROTECTED = sum(STORED.values())  # the stored flags of a message verified end to end

class Verdict(StrEnum):
    DELIVER = "deliver"  # in order: it, and any held ones after it, are ready for RECV
    HELD = "held"  # an earlier one is missing: stored, not yet visible
    DUPLICATE = "duplicate"


@dataclass
class PairIn:
    epoch: str
    expect: int = 1
    held: dict[int, MSGBLOK] = field(default_factory=dict)
    custody: bool = False  # its origin keeps copies until they are taken here (it probed)
    syncing: bool = False  # restored from a backup: all it holds is out of sight until the origin's probe


class PairsOut:
    """This origin's next PSEQ per (destination host, priority), and the streams it keeps custody
    copies of (`kept`)."""

    def __init__(self, next_by_dest: dict[tuple[str, int], int], kept: dict[tuple[str, int], Kept] | None = None):
        self.next = dict(next_by_dest)
        self.kept = dict(kept or {})

    def number(self, dest: str, priority: int) -> tuple[int, list[Change]]:
        pseq = self.next.get((dest, priority), 1)
        self.next[dest, priority] = pseq + 1
        changes = [ch.set_pair_out(dest, priority, pseq + 1)]
        if (dest, priority) not in self.kept:
            other = next((k for (d, _), k in self.kept.items() if d == dest), None)
            if other is not None:  # the destination keeps custody of this host's streams: of this one too
                self.kept[dest, priority] = Kept(pseq, other.epoch)
                changes.append(ch.set_custody_out(dest, priority, self.kept[dest, priority]))
        return pseq, changes

    def syncing(self, dest: str, priority: int) -> bool:
        kept = self.kept.get((dest, priority))
        return kept is not None and kept.syncing

    def restart(self, dest: str) -> list[Change]:
        """`dest` was started afresh: it expects 1 next, at every priority but those kept in
        custody (their probe tells it where to go on)."""
        streams = [key for key in self.next if key[0] == dest and key not in self.kept]
        for key in streams:
            self.next[key] = 1
        return [ch.set_pair_out(d, p, 1) for d, p in streams]


class PairsIn:
    """Per (origin host, priority): its epoch, the next PSEQ to deliver, and what waits for a gap."""

    def __init__(self, state: dict[tuple[str, int], tuple[str, int]],
                 custody: dict[tuple[str, int], tuple[str, bool]] | None = None,
                 gaps: list[tuple[str, int, str, int, float]] | None = None,
                 retired: list[tuple[str, int, str]] | None = None):
        self.pairs = {stream: PairIn(epoch, expect) for stream, (epoch, expect) in state.items()}
        # (origin, priority, epoch) -> {PSEQ that came refused: until when its stream waits for it (0: no longer)}
        self.gaps: dict[tuple[str, int, str], dict[int, float]] = {}
        for origin, priority, epoch, pseq, until in gaps or ():
            self.gaps.setdefault((origin, priority, epoch), {})[pseq] = until
        self.retired = {(origin, priority, epoch) for origin, priority, epoch in retired or ()}
        for stream, (epoch, syncing) in (custody or {}).items():
            pair = self.pairs.get(stream)
            if pair is not None and pair.epoch == epoch:
                pair.custody, pair.syncing = True, syncing

    def is_retired(self, stream: tuple[str, int], epoch: str) -> bool:
        """Did the stream go on under another epoch since this one (a message of it is a replay)?"""
        return (*stream, epoch) in self.retired

    def renewed(self, origin: str, epoch: str) -> bool:
        """Does `epoch` say the origin was started afresh since its last numbered message here (on
        none of its streams yet)?"""
        epochs = {pair.epoch for (o, _), pair in self.pairs.items() if o == origin}
        return bool(epochs) and epoch not in epochs

    def is_held(self, blk: MSGBLOK) -> bool:
        """Restore: a stored block above its pair's next expected number is still held; every one
        of a syncing pair is, until its origin's probe."""
        pair = self.pairs.get(blk.stream)
        if blk.pseq and pair is not None and pair.epoch == blk.epoch and (blk.pseq >= pair.expect or pair.syncing):
            pair.held[blk.pseq] = blk
            return True
        return False

    def arrive(self, blk: MSGBLOK) -> tuple[Verdict, list[MSGBLOK], list[Change]]:
        """The verdict on an arrival, and the blocks that become ready for RECV, in order."""
        pair = self.pairs.get(blk.stream)
        ready: list[MSGBLOK] = []
        created = False
        retire: list[Change] = []
        if pair is None or pair.epoch != blk.epoch:  # a new origin, or its checkpoint started afresh
            if pair is not None:
                ready = [pair.held[n] for n in sorted(pair.held)]
            if pair is not None and blk.flags & PROTECTED:  # its origin vouches for the new epoch
                self.retired.add((*blk.stream, pair.epoch))
                retire.append(ch.retire_epoch(*blk.stream, pair.epoch))
            pair = self.pairs[blk.stream] = PairIn(blk.epoch)
            created = True
        if blk.pseq < pair.expect or blk.pseq in pair.held:
            return Verdict.DUPLICATE, ready, retire
        pair.held[blk.pseq] = blk
        if pair.syncing:  # nothing goes on before the origin's probe
            return Verdict.HELD, ready, retire
        start = pair.expect
        changes = retire + self._drain(blk.stream, pair, ready)
        changes += [ch.set_pair_in(*blk.stream, pair.epoch, pair.expect)] if pair.expect != start or created else []
        return (Verdict.DELIVER if pair.expect > blk.pseq else Verdict.HELD), ready, changes

    def _drain(self, stream: tuple[str, int], pair: PairIn, ready: list[MSGBLOK]) -> list[Change]:
        """The blocks in order from the next expected on, past the numbers whose refused message's
        wait is over; the gaps left behind are dropped."""
        gaps = self.gaps.get((*stream, pair.epoch), {})
        while pair.expect in pair.held or gaps.get(pair.expect) == 0:
            if pair.expect in pair.held:
                ready.append(pair.held.pop(pair.expect))
            pair.expect += 1
        passed = [n for n in gaps if n < pair.expect]
        for n in passed:
            del gaps[n]
        return [ch.delete_gap(*stream, pair.epoch, n) for n in passed]

    def refused(self, stream: tuple[str, int], epoch: str, pseq: int, until: float) -> list[Change]:
        """PSEQ came refused: its stream waits for the genuine message until `until` (wall), no longer."""
        pair = self.pairs.get(stream)
        gaps = self.gaps.setdefault((*stream, epoch), {})
        if (pair is not None and pair.epoch == epoch and (pseq < pair.expect or pseq in pair.held)) or pseq in gaps:
            return []  # the genuine one came already, or its wait runs already
        gaps[pseq] = until
        return [ch.set_gap(*stream, epoch, pseq, until)]

    def due(self, wall: float) -> tuple[list[MSGBLOK], list[Change], float | None]:
        """The streams whose wait for a refused message is over go on without it: the blocks now
        ready, the changes, and when the next wait ends (None: none waits)."""
        ready: list[MSGBLOK] = []
        changes: list[Change] = []
        for (origin, priority, epoch), gaps in self.gaps.items():
            over = [n for n, until in gaps.items() if 0 < until <= wall]
            for n in over:
                gaps[n] = 0.0
                changes.append(ch.set_gap(origin, priority, epoch, n, 0.0))
            pair = self.pairs.get((origin, priority))
            if over and pair is not None and pair.epoch == epoch and not pair.syncing:
                start = pair.expect
                changes += self._drain((origin, priority), pair, ready)
                if pair.expect != start:
                    changes.append(ch.set_pair_in(origin, priority, epoch, pair.expect))
        self.gaps = {key: gaps for key, gaps in self.gaps.items() if gaps}
        return ready, changes, min((u for gaps in self.gaps.values() for u in gaps.values() if u), default=None)

    def settle(self, stream: tuple[str, int], epoch: str, first: int, low: int, kept: Callable[[int], bool],
               upto: int, since: bool) -> tuple[PairIn, list[MSGBLOK], list[MSGBLOK], list[Change]]:
        """The origin's probe: it keeps copies from PSEQ `first` on, `kept` (those in [first, upto))
        are not taken here yet, `low` is the lowest of them (or `upto`). A syncing pair drops what it
        holds of [first, upto) that is not kept (taken since the backup) and goes on from `low`; a
        pair that waits for PSEQs the origin no longer has goes on from `low` too, unless they are
        below `first` and custody began `since` this incarnation (they may still be on their way,
        from before custody). Returns the pair,
        the blocks now ready (in order), those dropped, and the changes that store the pair."""
        pair = self.pairs.get(stream)
        ready: list[MSGBLOK] = []
        if pair is None or pair.epoch != epoch:  # unknown here (forgotten in a restore, or nothing came yet), or a
            if pair is not None:  # new incarnation
                ready = [pair.held[n] for n in sorted(pair.held)]
            pair = self.pairs[stream] = PairIn(epoch, 1 if since else low)  # (not restored since custody began:
            # nothing of it came yet, and those numbered before custody, below `first`, may be on their way)
        dropped = [pair.held.pop(n) for n in sorted(pair.held)
                   if pair.syncing and first <= n < upto and not kept(n)]
        if pair.syncing or pair.expect >= first or not since:
            pair.expect = max(pair.expect, low)
        pair.custody, pair.syncing = True, False
        ready += [pair.held.pop(n) for n in sorted(pair.held) if n < pair.expect]
        while pair.expect in pair.held:
            ready.append(pair.held.pop(pair.expect))
            pair.expect += 1
        return pair, ready, dropped, [ch.set_pair_in(*stream, pair.epoch, pair.expect),
                                      ch.set_custody_in(*stream, pair.epoch, False)]

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

    def epoch_of(self, dest: str, priority: int) -> str:
        """The epoch a stream is numbered under: this host's, or for a stream kept in custody across
        a restore from a backup, the one it had before."""
        kept = self.out.kept.get((dest, priority))
        return kept.mine if kept is not None and kept.mine else self.epoch

    def number(self, blk: MSGBLOK) -> list[Change]:
        """Give one of this host's blocks its PSEQ (and epoch); the changes that store the count."""
        blk.pseq, changes = self.out.number(blk.dest, blk.priority)
        blk.epoch = self.epoch_of(blk.dest, blk.priority)
        return changes
