"""End-to-end custody: an origin keeps each message it sent until its destination has it taken,
so that restoring any host from a backup loses nothing and delivers nothing twice
(docs/ROUTING.md, "Custody"; the way MSMQ keeps a message at its source until the destination's
own acknowledgement).

As an origin, this host keeps a copy of every message of a stream (destination, priority) that
it numbered, once the next host has acknowledged it: the row stays in the SEND_LIST table with
the stored-only flag CUSTODY, out of the Message-Sender's sight, counted against `buffers`. It
drops the copy when the destination says the message was taken there, sends it again when the
destination's answer to a probe says it does not have it, and forgets it GRACE seconds after its
ttl. As a destination, it tells each origin which of its messages were taken (batched: a
message a stream for STATE_BATCH taken, or STATE_WAIT seconds after the first one, never more
often than every STATE_EVERY seconds), and answers probes.

Custody begins when the origin first hears a destination's state (an older MCCS never sends
one, so it never makes copies pile up), from the next number it gives: `PairsOut.kept`. Three
daemon messages carry it (mccs.core.control), each at most DAEMON_ROOM bytes (and a fourth, `had`,
below):

    {"state":"1f2e3d4c","p":0,"x":42,"r":"37,40-41","h":"44-45","a":2,"m":45}
        destination -> origin, about the origin's epoch 1f2e3d4c, priority 0: every PSEQ below
        x=42 arrived, of which 37, 40 and 41 are still on RECV_LIST (the rest were taken); 44 and
        45 are held for order (h, with a only: the answer to a probe; y, if present, says h
        stops there for room), and 45 is the highest that ever arrived (m, in an answer)
    {"probe":"1f2e3d4c","p":0,"f":30,"n":46,"k":"37-45"}
        origin -> destination: copies are kept from PSEQ f=30, the next PSEQ is n=46, and these
        of [f, n) are not known taken (n is lowered when k does not fit)
    {"sync":"1f2e3d4c","p":0}
        a destination restored from a backup asks the origin for a probe

A destination restored from a backup keeps its custody streams (checkpoint.store) and holds
everything of them out of sight until the probe: what it holds that the probe does not keep was
taken after the backup and is dropped, what the origin keeps and it lacks comes again. A transit
host restored from a backup lost what it had acknowledged since: the origin probes at once when
that host was its neighbour (it signs on with a new epoch), else after PROBE_FIRST seconds without
progress; the answer finds the gap and has it sent again. An origin restored from a
backup keeps its custody streams under the epoch they had (Pairs.epoch_of), with its copies and
numbered blocks, and numbers nothing new in them until the destination's answer to its probe says
how far the lost incarnation got (m): then from JUMP past it.

Doubts. A message this origin had stored but not yet numbered when the backup was taken may have
been numbered and delivered by the lost incarnation since. The restored origin flags each such
message DOUBT (checkpoint.store) and sends none of its stream until the destination has said
whether it had it: its probes carry the MSG_IDs in doubt (u), lowest first, as many as fit, and a
destination of this version answers, besides its state, which of those below z came to it under
the stream's epoch (d):

    {"probe":"1f2e3d4c","p":0,"e":"5a6b7c8d","f":30,"n":46,"k":"37-45","u":"101-104,107"}
    {"had":"1f2e3d4c","p":0,"z":108,"d":"101-103"}

Here 101 to 103 came (the restored origin drops them: they were delivered once), 104 and 107 did
not (they go, numbered anew). A destination keeps the MSG_IDs of what came in custody streams (SEEN,
the last DUP_WINDOW per origin and epoch: the origin gives no id twice within them). Its states that
answer a probe say a=2; a=1 is an earlier MCCS, which keeps no such record and sends no `had`: the
doubts then go as they are (and may come twice).
"""
from __future__ import annotations

import json
import logging
from typing import Callable, Iterable

from checkpoint import changes as ch
from checkpoint.changes import CUSTODY, DOUBT, LOOSE, Kept, Table

from mccs.core.effects import Effects
from mccs.core.envelope import NOTICE, PRIORITY_MAX
from mccs.core.lists import MSGBLOK, BlockState
from mccs.core.msgids import ID_SPACE, KeyWindow
from mccs.core.notices import DAEMON_ROOM, NAME, Notices
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.custody")

STATE_BATCH = 64  # messages taken that make a state at once ...
STATE_WAIT = 10.0  # ... or seconds after the first of them: the cost on a line stays about 1%
STATE_EVERY = 2.0  # seconds between two states of one stream, at least
PROBE_FIRST = 30.0  # seconds without progress before the origin probes, doubling ...
PROBE_MOST = 600.0  # ... up to this
SYNC_MOST = 600.0  # seconds a restored destination waits for an origin's probe before it goes on without
GRACE = 600.0  # seconds a copy is kept past its ttl (a void of it on the way has told its sender)
JUMP = 1 << 16  # numbers a restored origin leaves unused, for those it gave after the backup (PSEQ is 32 bits)
KINDS = ("state", "probe", "sync", "had")
DOUBTS_ROOM = 32  # characters of a probe for the MSG_IDs in doubt
ANSWER = 2  # `a` of a state that answers a probe: 1 from an MCCS that sends no `had`

Stream = tuple[str, int]  # (the other host, priority)


def ranges(numbers: Iterable[int], room: int) -> tuple[str, int | None]:
    """Sorted numbers as "3,5-9,12", as many as fit in `room` characters; and the first left
    out (None: all fit)."""
    out: list[str] = []
    used = 0
    run: list[int] = []

    def close() -> bool:
        nonlocal used
        text = str(run[0]) if run[0] == run[1] else f"{run[0]}-{run[1]}"
        if used + len(text) + bool(out) > room:
            return False
        out.append(text)
        used += len(text) + (len(out) > 1)
        return True

    for n in numbers:
        if run and n == run[1] + 1:
            run[1] = n
            continue
        if run and not close():
            return ",".join(out), run[0]
        run = [n, n]
    if run and not close():
        return ",".join(out), run[0]
    return ",".join(out), None


def parse_ranges(text: str) -> list[tuple[int, int]]:
    """"3,5-9" -> [(3, 3), (5, 9)]; ValueError for anything else."""
    out = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if a < 1 or b < a:
            raise ValueError(f"bad range {part!r}")
        out.append((a, b))
    return out


def within(spans: list[tuple[int, int]], n: int) -> bool:
    return any(a <= n <= b for a, b in spans)


def seen_as(origin: str, epoch: str) -> str:
    """The key of the MSG_IDs that came in an origin's custody streams of one epoch (SEEN)."""
    return f"{origin}:{epoch}"


class Custody:
    def __init__(self, hs: HostState, notices: Notices, seen: KeyWindow):
        self.host, self.lists, self.ids, self.pairs, self.counters = hs.id, hs.lists, hs.ids, hs.pairs, hs.counters
        self.routes = hs.routes
        self.notices, self.seen = notices, seen
        self.copies: dict[Stream, dict[int, MSGBLOK]] = {}  # (dest, priority) -> PSEQ -> copy
        self.probe_at: dict[Stream, tuple[float, float]] = {}  # (dest, priority) -> (when, the wait after it), wall
        self.dirty: dict[Stream, tuple[int, float]] = {}  # (origin, priority): taken since its last state, since
        self.state_at: dict[Stream, float] = {}  # (origin, priority) -> when its last state went
        self.told: dict[Stream, MSGBLOK] = {}  # (origin, priority) -> its last state, while it waits on SEND_LIST
        self.offered: set[Stream] = set()  # streams without custody told one state in this run
        self.expire_at = 0.0  # when to look for copies past their ttl next (wall)
        self.fresh: list[MSGBLOK] = []  # kept since the last pass
        self.since: dict[int, float] = {}  # seq -> when it was kept, or this daemon started (wall)
        self.probed: set[Stream] = set()  # streams kept, probed once in this run (so the destination knows)
        self.via: dict[Stream, str] = {}  # the neighbour that last acknowledged a copy of the stream, in this run
        # syncing streams: (when to ask the origin for a probe again, the wait after it, when to give up)
        self.syncs = {s: (0.0, PROBE_FIRST, -1.0) for s, pair in self.pairs.into.pairs.items() if pair.syncing}
        self.hand: Callable[[Effects, list[MSGBLOK], float], None] = lambda fx, blocks, wall: None  # the receiver's

    @property
    def count(self) -> int:
        return sum(len(c) for c in self.copies.values())

    # -- the origin -------------------------------------------------------------------------------
    def keeps(self, blk: MSGBLOK) -> bool:
        """Is a block the next host acknowledged whole kept as a copy?"""
        kept = self.pairs.out.kept.get((blk.dest, blk.priority))
        return (kept is not None and blk.origin == self.host and blk.pseq >= kept.first
                and blk.epoch == self.pairs.epoch_of(blk.dest, blk.priority))

    def keep(self, fx: Effects, blk: MSGBLOK, via: str) -> None:
        """The next host (`via`) has it (it left SEND_LIST's sight): kept until it is taken there."""
        self.via[(blk.dest, blk.priority)] = via
        blk.flags |= CUSTODY
        fx.change(ch.set_flags(Table.SEND_LIST, blk.seq, blk.flags))
        self.restore(blk)

    def restore(self, blk: MSGBLOK) -> None:
        stream = (blk.dest, blk.priority)
        self.copies.setdefault(stream, {})[blk.pseq] = blk
        self.lists.send.kept += 1
        self.probe_at.setdefault(stream, (-1.0, PROBE_FIRST))  # (-1: PROBE_FIRST from the next pass)
        self.fresh.append(blk)  # (a copy restored at a start may be on its way too: it waits as a new one)

    def _take(self, stream: Stream, pseq: int) -> MSGBLOK:
        blk = self.copies[stream].pop(pseq)
        self.since.pop(blk.seq, None)
        if not self.copies[stream]:
            del self.copies[stream]
        self.lists.send.kept -= 1
        return blk

    def _drop(self, fx: Effects, stream: Stream, pseq: int) -> None:
        blk = self._take(stream, pseq)
        self.ids.release(blk.msg_id)
        fx.change(ch.delete_block(Table.SEND_LIST, blk.seq))

    def _state(self, fx: Effects, dest: str, body: dict, wall: float) -> None:
        """A destination's state: copies it took are dropped; in an answer to a probe, those it
        does not have go again. The first state of a stream begins custody, and a probe at once
        tells the destination so."""
        stream = (dest, _int(body, "p"))
        x, taken_not = _int(body, "x"), parse_ranges(_str(body, "r"))
        held, upto = parse_ranges(_str(body, "h")), _int(body, "y") if "y" in body else None
        if body["state"] != self.pairs.epoch_of(*stream):
            return  # about an earlier incarnation of this host
        kept, epoch = self.pairs.out.kept.get(stream), _str(body, "e")
        if kept is None:
            self._begin(fx, stream, epoch)
            return
        if kept.epoch != epoch:  # (a destination restored since keeps custody, from there on)
            kept.epoch = epoch
            fx.change(ch.set_custody_out(*stream, kept))
        copies = self.copies.get(stream, {})
        released = [n for n in copies if n < x and not within(taken_not, n)]
        for n in released:
            self._drop(fx, stream, n)
        self.counters["custody_released"] += len(released)
        if released and stream in self.copies:
            self.probe_at[stream] = (wall + PROBE_FIRST, PROBE_FIRST)
        if body.get("a") == 1 and self.doubts(stream):  # an earlier MCCS, which keeps no record of what came
            log.warning("%s: %s cannot say which of this host's messages in doubt it had (an earlier MCCS): they "
                        "go, and may come twice", self.host, stream[0])
            self._doubts_answered(fx, stream, ID_SPACE + 1, [])
        if body.get("a") and kept.syncing:
            self._synced(fx, stream, _int(body, "m") if "m" in body else max([x - 1, *(b for _, b in held)]), wall)
        if body.get("a"):  # those it lacks, unless they may well be on their way still, or their ttl nearly
            for n, blk in sorted(self.copies.get(stream, {}).items()):  # passed (the first copy's void tells)
                if (n >= x and not within(held, n) and (upto is None or n < upto)
                        and self.since.get(blk.seq, 0.0) <= wall - PROBE_FIRST
                        and not 0 < blk.expires <= wall + PROBE_FIRST):
                    self._again(fx, stream, n)

    def _begin(self, fx: Effects, stream: Stream, epoch: str) -> None:
        """A stream's first state: custody begins from its next number, and a probe at once tells
        the destination so."""
        kept = self.pairs.out.kept[stream] = Kept(self.pairs.out.next.get(stream, 1), epoch)
        fx.change(ch.set_custody_out(*stream, kept))
        self.counters["custody_begun"] += 1
        log.info("%s: %s takes custody: messages for it at priority %d are kept until taken there, from %d",
                 self.host, stream[0], stream[1], kept.first)
        self.probe_at[stream] = (0.0, PROBE_FIRST)

    def _synced(self, fx: Effects, stream: Stream, top: int, wall: float) -> None:
        """The destination answered this origin, restored from a backup: numbering goes on past the
        highest it has seen (`top`), and past room (JUMP) for those given after the backup that may
        still be on their way (the destination passes the gap at the next probe). The blocks stored
        meanwhile go on, numbered as they leave."""
        kept = self.pairs.out.kept[stream]
        n = self.pairs.out.next[stream] = max(self.pairs.out.next.get(stream, 1), top + 1) + JUMP
        kept.syncing = False
        fx.change(ch.set_pair_out(*stream, n), ch.set_custody_out(*stream, kept))
        self.counters["custody_synced"] += 1
        log.warning("%s: %s has seen up to %d of this host's stream at priority %d (restored from a backup): "
                    "numbering goes on from %d", self.host, stream[0], top, stream[1], n)
        self.probe_at[stream] = (wall + PROBE_FIRST, PROBE_FIRST)

    def doubts(self, stream: Stream) -> list[MSGBLOK]:
        """This origin's messages of a stream in doubt (see the module docstring), by MSG_ID."""
        return sorted((b for b in self.lists.send.queue(*stream) if b.flags & DOUBT), key=lambda b: b.msg_id)

    def _had(self, fx: Effects, dest: str, body: dict) -> None:
        stream = (dest, _int(body, "p"))
        if body["had"] == self.pairs.epoch_of(*stream):
            self._doubts_answered(fx, stream, _int(body, "z"), parse_ranges(_str(body, "d")))

    def _doubts_answered(self, fx: Effects, stream: Stream, upto: int, had: list[tuple[int, int]]) -> None:
        """Of those in doubt below `upto`, those the destination had are dropped (delivered once),
        the others go."""
        for blk in (b for b in self.doubts(stream) if b.msg_id < upto):
            if within(had, blk.msg_id):
                self.lists.send.remove(blk)
                self.ids.release(blk.msg_id)
                fx.change(ch.delete_block(Table.SEND_LIST, blk.seq))
                self.counters["custody_doubts_had"] += 1
            else:
                blk.flags &= ~DOUBT
                fx.change(ch.set_flags(Table.SEND_LIST, blk.seq, blk.flags))
                self.counters["custody_doubts_go"] += 1
        if self.doubts(stream):
            self.probe_at[stream] = (0.0, PROBE_FIRST)  # the rest: ask again at once

    def _again(self, fx: Effects, stream: Stream, pseq: int) -> None:
        """A copy the destination does not have: on SEND_LIST again, the same number and epoch."""
        blk = self._take(stream, pseq)
        blk.flags &= ~CUSTODY
        blk.state, blk.sent, blk.acked, blk.acked_by, blk.next_off, blk.line = BlockState.QUEUED, False, 0, "", 0, None
        fx.change(ch.set_flags(Table.SEND_LIST, blk.seq, blk.flags))
        self.lists.send.add(blk)
        self.counters["custody_resent"] += 1
        fx.trace("msg", "resent", to_id=blk.to_id, from_id=blk.from_id, msg_id=blk.msg_id, user_id=blk.user_id,
                 pseq=blk.pseq)

    def probe(self, fx: Effects, stream: Stream, wall: float) -> None:
        """Tell the destination which numbers are not known taken: the copies, and those numbered
        blocks still on SEND_LIST."""
        dest, priority = stream
        stream_kept, n = self.pairs.out.kept[stream], self.pairs.out.next.get(stream, 1)
        first, mine = stream_kept.first, self.pairs.epoch_of(dest, priority)
        kept = set(self.copies.get(stream, {}))
        kept.update(b.pseq for b in self.lists.send.queue(dest, priority)
                    if b.origin == self.host and b.pseq >= first and b.epoch == mine)
        body = {"probe": mine, "p": priority, "e": stream_kept.epoch, "f": first, "n": n}
        doubts = [b.msg_id for b in self.doubts(stream)]
        if doubts:
            body["u"], _ = ranges(doubts, DOUBTS_ROOM)
        text, cut = ranges(sorted(kept), _room(body, "k"))
        body.update(n=n if cut is None else cut, k=text)
        self.counters["custody_probes"] += 1
        self._send(fx, dest, body, wall)

    def expire(self, fx: Effects, wall: float) -> None:
        """Copies GRACE seconds past their ttl: whoever held the message has told its sender.
        Looked for once a minute (a pass does not walk every copy)."""
        if wall < self.expire_at:
            return
        self.expire_at = wall + 60.0
        for stream, copies in list(self.copies.items()):
            for n in [n for n, b in copies.items() if b.expires and b.expires + GRACE <= wall]:
                self._drop(fx, stream, n)
                self.counters["custody_expired"] += 1

    def renewed(self, peer: str) -> None:
        """A neighbour signed on with a new epoch (restored from a backup, say): its custody
        streams are probed now rather than numbered again; so are the streams that go through
        it, whose copies it held are gone with its old incarnation (not on their way: the answer
        has them sent again at once, not PROBE_FIRST later)."""
        for stream in self.pairs.out.kept:
            if peer in (stream[0], self.via.get(stream)):
                self.probe_at[stream] = (0.0, PROBE_FIRST)
                for blk in self.copies.get(stream, {}).values():
                    self.since[blk.seq] = 0.0

    # -- the destination --------------------------------------------------------------------------
    def _probe(self, fx: Effects, origin: str, body: dict, wall: float) -> None:
        stream = (origin, _int(body, "p"))
        first, upto, kept = _int(body, "f"), _int(body, "n"), parse_ranges(_str(body, "k"))
        if upto < first:
            raise ValueError(f"n {upto} is below f {first}")
        low = min([max(a, first) for a, b in kept if b >= first] + [upto])
        was = self.pairs.into.pairs.get(stream)
        syncing = was is not None and was.syncing
        _, ready, dropped, changes = self.pairs.into.settle(stream, _str(body, "probe"), first, min(low, upto),
                                                            lambda n: within(kept, n), upto,
                                                            _str(body, "e") == self.pairs.epoch)
        fx.change(*changes, *(ch.delete_block(Table.RECV_LIST, b.seq) for b in dropped))
        self.counters["custody_taken_before"] += len(dropped)
        if syncing:
            log.warning("%s: %s's probe: of what the backup held of it, %d were taken since (dropped), %d go on",
                        self.host, origin, len(dropped), len(ready))
        self.hand(fx, ready, wall)
        self._tell(fx, stream, wall, answer=True)
        self._doubts(fx, stream, _str(body, "probe"), parse_ranges(_str(body, "u")), wall)

    def _doubts(self, fx: Effects, stream: Stream, epoch: str, asked: list[tuple[int, int]], wall: float) -> None:
        """Which of the MSG_IDs a restored origin asks about came here (see the module docstring)."""
        if not asked:
            return
        if asked[-1][1] > ID_SPACE:
            raise ValueError(f"MSG_IDs up to {asked[-1][1]} asked about")
        key = seen_as(stream[0], epoch)
        body: dict = {"had": epoch, "p": stream[1], "z": asked[-1][1] + 1}
        body["d"], cut = ranges([n for a, b in asked for n in range(a, b + 1) if (key, n) in self.seen],
                                _room(body, "d"))
        if cut is not None:  # the rest is asked again
            body["z"] = cut
        self._send(fx, stream[0], body, wall)

    def _sync(self, dest: str, body: dict) -> None:
        stream = (dest, _int(body, "p"))
        if stream in self.pairs.out.kept and body["sync"] == self.pairs.epoch_of(*stream):
            self.probe_at[stream] = (0.0, PROBE_FIRST)

    def states(self, fx: Effects, wall: float) -> float | None:
        """The states owed: of streams with custody whose messages were taken here (and once a
        run, of a stream without custody: the offer). Returns when the next one is due."""
        for stream, n in self.lists.recv.left.items():
            count, since = self.dirty.get(stream, (0, wall))
            self.dirty[stream] = (count + n, since)
        self.lists.recv.left.clear()
        due = None
        for stream, (count, since) in sorted(self.dirty.items()):  # (in order: the same whatever the hash seed)
            pair = self.pairs.into.pairs.get(stream)
            if (pair is None or pair.syncing or stream[0] == self.host
                    or not pair.custody and (stream in self.offered or self.routes.next_hop(stream[0]) is None)):
                del self.dirty[stream]  # (an offer goes once a run, and only where it can go)
                continue
            told = self.told.get(stream)
            if told is not None and told in self.lists.send:  # the last one has not left: this one waits for it
                continue
            batched = wall if count >= STATE_BATCH or not pair.custody else since + STATE_WAIT
            at = max(self.state_at.get(stream, 0.0) + STATE_EVERY, batched)
            if at > wall:
                due = min(due or at, at)
                continue
            del self.dirty[stream]
            self.offered.add(stream)
            self._tell(fx, stream, wall)
        return due

    def _tell(self, fx: Effects, stream: Stream, wall: float, answer: bool = False) -> None:
        origin, priority = stream
        pair = self.pairs.into.pairs[stream]
        on_list = sorted(b.pseq for b in self.lists.recv if b.stream == stream and b.epoch == pair.epoch
                         and 0 < b.pseq < pair.expect)
        body: dict = {"state": pair.epoch, "p": priority, "e": self.pairs.epoch, "x": pair.expect}
        if answer:  # (room kept for what an answer adds)
            body.update(a=ANSWER, h="", y=10 ** 12, m=max([pair.expect - 1, *pair.held]))
        text, cut = ranges(on_list, _room(body, "r"))
        if cut is not None:  # the rest does not fit: say less is taken
            body["x"] = cut
        body["r"] = text
        if answer:
            body["h"], more = ranges(sorted(pair.held), _room(body, "h"))
            if more is None and cut is None:
                del body["y"]
            else:  # what it has is said up to there only
                body["y"] = more if cut is None else cut
        self.state_at[stream] = wall
        self.counters["custody_states"] += 1
        blk = self._send(fx, origin, body, wall)
        if blk is not None:
            self.told[stream] = blk

    # -- both -------------------------------------------------------------------------------------
    def arrived(self, fx: Effects, kind: str, origin: str, body: dict, wall: float) -> None:
        """A custody message from `origin`'s daemon (ValueError, KeyError, TypeError if malformed)."""
        if kind == "state":
            self._state(fx, origin, body, wall)
        elif kind == "probe":
            self._probe(fx, origin, body, wall)
        elif kind == "had":
            self._had(fx, origin, body)
        else:
            self._sync(origin, body)

    def run(self, fx: Effects, wall: float) -> float | None:
        """In the pass: syncs asked for, probes due, copies expired, states owed. Returns the
        wall-clock time the next one is due."""
        for blk in self.fresh:
            self.since[blk.seq] = wall
        self.fresh.clear()
        due = self._syncs(fx, wall)
        self.expire(fx, wall)
        states = self.states(fx, wall)
        due = states if due is None else due if states is None else min(due, states)
        for stream in sorted(self.pairs.out.kept.keys() - self.probed):
            self.probed.add(stream)
            self.probe_at.setdefault(stream, (0.0, PROBE_FIRST))
        for stream, (at, wait) in list(self.probe_at.items()):
            if at < 0:  # a first copy: a probe if nothing moves for PROBE_FIRST
                at = wall + wait
            elif at <= wall:
                if stream in self.pairs.out.kept:
                    self.probe(fx, stream, wall)
                if (not self.pairs.out.syncing(*stream)  # (a restored origin asks until it is answered)
                        and not self.doubts(stream)
                        and not any(not b.flags & NOTICE for b in self.copies.get(stream, {}).values())):
                    del self.probe_at[stream]  # nothing kept, or daemon messages only: no probe of their own
                    continue
                at, wait = wall + wait, min(wait * 2, PROBE_MOST)
            self.probe_at[stream] = (at, wait)
            due = at if due is None else min(due, at)
        return due

    def _syncs(self, fx: Effects, wall: float) -> float | None:
        """Ask the origins of syncing streams for a probe, again and again less often; after SYNC_MOST
        without one (an origin that no longer keeps custody, or gone), go on as the backup was."""
        for stream, (at, wait, end) in list(self.syncs.items()):
            pair = self.pairs.into.pairs.get(stream)
            if pair is None or not pair.syncing:
                del self.syncs[stream]
            elif 0 <= end <= wall:
                del self.syncs[stream]
                self.counters["custody_syncs_given_up"] += 1
                log.warning("%s: no probe came from %s for %.0f s: its stream goes on as the backup held it (a "
                            "message taken since may come again)", self.host, stream[0], SYNC_MOST)
                _, ready, _, changes = self.pairs.into.settle(stream, pair.epoch, 0, pair.expect, lambda n: True,
                                                              0, False)
                fx.change(*changes)
                self.hand(fx, ready, wall)
            elif at <= wall:
                self._send(fx, stream[0], {"sync": pair.epoch, "p": stream[1]}, wall)
                self.syncs[stream] = (wall + wait, min(wait * 2, PROBE_MOST), wall + SYNC_MOST if end < 0 else end)
        return min((at for at, _, _ in self.syncs.values()), default=None)

    def _send(self, fx: Effects, host: str, body: dict, wall: float) -> MSGBLOK | None:
        """Unnumbered (LOOSE): they need no order, a copy that comes twice does no harm, and they
        are in no stream, so one taken makes no state of its own."""
        return self.notices.message(fx, host + NAME, 0, json.dumps(body, separators=(",", ":")).encode(), wall,
                                    next(iter(body)), priority=PRIORITY_MAX, flags=LOOSE)

    def status(self) -> dict:
        return {"copies": {f"{d}/p{p}" if p else d: len(c) for (d, p), c in sorted(self.copies.items())},
                "owed": len(self.dirty.keys() | self.lists.recv.left.keys()),  # streams with a state to come
                "syncing": sorted(f"{o}/p{p}" if p else o for (o, p), pair in self.pairs.into.pairs.items()
                                  if pair.syncing),
                "syncing_to": sorted(f"{d}/p{p}" if p else d for (d, p), k in self.pairs.out.kept.items()
                                     if k.syncing),  # (restored: no new number before the destination answers)
                "doubts": sum(bool(b.flags & DOUBT) for b in self.lists.send)}  # (restored: not sent before it answers)


def _room(body: dict, key: str) -> int:
    """Characters left for one more string field in a daemon message of DAEMON_ROOM bytes."""
    return DAEMON_ROOM - len(json.dumps({**body, key: ""}, separators=(",", ":")))


def _int(body: dict, key: str) -> int:
    value = body[key]
    if type(value) is not int or value < 0:
        raise ValueError(f"{key} is {value!r}, not a number")
    return value


def _str(body: dict, key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"{key} is {value!r}, not a string")
    return value
