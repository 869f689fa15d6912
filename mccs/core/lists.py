"""The paper's control blocks and its three lists, held in memory and mirrored in the checkpoint.

SEND_LIST holds MSGBLOKs accepted here and not yet acknowledged by the next host; RECV_LIST holds
MSGBLOKs arrived here (from a line or a local SEND) and not yet taken by RECV; WAIT_LIST holds
PRQBLOKs, the pending SEND and RECV requests of connected processes. Each list is indexed for
the lookups its users make, so no pass walks a whole list: the Message-Sender reads SEND_LIST
per destination, a RECV looks only at its own process's mailbox, and WAIT_LIST keeps its
waiting RECVs per process with their deadlines in a heap.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections import Counter, OrderedDict, defaultdict, deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Iterable, Iterator, Mapping, TypeVar

from checkpoint.changes import PendingSend, Row, Stored
from linedrivers.ids import host_of

from mccs.core.envelope import HELD, REPLY


GIVEN_UP_KEEP = 4096  # requests that timed out, remembered so their replies are dropped on arrival

K = TypeVar("K")


class BlockState(StrEnum):
    QUEUED = "waiting"  # SEND_LIST: waits for its line; RECV_LIST: waits for a RECV
    IN_FLIGHT = "in flight"  # SEND_LIST: handed to a line machine, acknowledgement awaited
    HANDED = "handed"  # RECV_LIST: handed to a process, its confirm awaited


@dataclass(eq=False)
class MSGBLOK:
    seq: int  # checkpoint order, kept across restarts
    to_id: str
    from_id: str
    msg_id: int
    user_id: int
    data: bytes | Stored  # Stored: a large message, kept in the checkpoint only
    ts: float  # when it was stored here (wall clock)
    hops: int = 0  # lines crossed (routed messages)
    pseq: int = 0  # end-to-end number of (origin, destination), 0 until it leaves on a routing line
    epoch: str = ""  # the origin's checkpoint epoch, with pseq
    expires: float = 0.0  # SEND_LIST: wall-clock time it stops waiting (undeliverable); 0: never
    flags: int = 0  # mccs.core.envelope's RECEIPT, NOTICE, VOID
    crc: int = 0  # CRC-32 of a text that goes in segments (mccs.core.segments)
    priority: int = 0  # 0 to 7: a waiting block of higher priority goes first, on a line and to RECV
    seal: bytes = b""  # SEND_LIST: a transit copy's end-to-end trailer, carried on untouched (mccs.core.e2e)
    acked: int = 0  # SEND_LIST, in segments: bytes the next host holds (stored)
    acked_by: str = ""  # SEND_LIST, in segments: that next host ("": not known, an older checkpoint)
    state: BlockState = BlockState.QUEUED
    holder: int | None = None  # RECV_LIST: the connection it was handed to
    sent: bool = False  # SEND_LIST: traced as sent on a line
    parked_until: float = 0.0  # SEND_LIST: a void that met the hop limit twice waits here until then (wall)
    next_off: int = 0  # SEND_LIST, in segments: where the next segment handed to a line starts
    line: str | None = None  # SEND_LIST, in segments: the peer of the line carrying it now

    @classmethod
    def from_row(cls, row: Row) -> "MSGBLOK":
        blk = cls(*(getattr(row, f.name) for f in dataclasses.fields(row)))
        blk.next_off = blk.acked
        return blk

    @property
    def size(self) -> int:
        return len(self.data)

    def more_on(self, peer: str) -> bool:
        """Going in segments on the line to `peer`, with pieces still to hand to it."""
        return self.line == peer and self.next_off < self.size

    @property
    def origin(self) -> str:
        return host_of(self.from_id)

    @property
    def name(self) -> str:
        """How the operator knows it (`mccs queue`, status): origin host / MSG_ID."""
        return f"{self.origin}/{self.msg_id}"

    @property
    def held(self) -> bool:
        """Held by the operator: no line takes it (or any more of it) until released."""
        return bool(self.flags & HELD)

    @property
    def dest(self) -> str:
        return host_of(self.to_id)

    @property
    def stream(self) -> tuple[str, int]:
        """Its end-to-end order stream at the destination: (origin host, priority)."""
        return (self.origin, self.priority)

    @property
    def key(self) -> tuple[str, int]:
        return (self.origin, self.msg_id)


class Op(StrEnum):
    SEND = "send"
    RECV = "recv"


@dataclass(eq=False)
class PRQBLOK:
    """A process request waiting on WAIT_LIST: a SEND that found no buffer, or a RECV."""
    op: Op
    conn: int | None  # the connection to answer; None for a restored SEND whose process is gone
    rid: object  # the request's id on that connection, echoed in the reply
    from_id: str  # SEND: the sender (set by the daemon); RECV: the FROM_ID selection ("" = any)
    to_id: str  # SEND: destination; RECV: the receiving process
    user_id: int = 0
    data: bytes = b""
    req: str = ""  # SEND: the client's random request id
    ttl: float = 0.0  # SEND: seconds it may wait once stored (0: the host's ttl)
    flags: int = 0  # SEND: RECEIPT asked
    priority: int = 0  # SEND: 0 to 7
    seq: int = 0  # SEND: its place on WAIT_LIST, kept in the checkpoint once durable
    wait: bool = True  # RECV: STATUS 0, wait for a message
    deadline: float | None = None  # RECV: give up (answer "nothing") at this monotonic time
    reply_to: int = 0  # RECV: take only the reply to this request (its MSG_ID)
    most: int = 1  # RECV: hand up to this many messages at once (an unselective one)
    durable: bool = False  # SEND: stored in the checkpoint's wait_list
    retries: list[tuple[int, object]] = field(default_factory=list)  # SEND: (conn, rid) asking again meanwhile
    batch: list["PRQBLOK"] = field(default_factory=list)  # a send_many: its SENDs, stored together or not at all
    done: bool = False  # answered: skipped where it still sits in a queue or the heap

    @classmethod
    def restored(cls, p: PendingSend) -> "PRQBLOK":
        return cls(Op.SEND, None, None, p.from_id, p.to_id, p.user_id, p.data, req=p.req, ttl=p.ttl, flags=p.flags,
                   priority=p.priority, seq=p.seq, durable=True)

    def pending(self) -> PendingSend:
        return PendingSend(self.req, self.seq, self.from_id, self.to_id, self.user_id, self.data, self.ttl, self.flags,
                           self.priority)

    def answers(self) -> list[tuple[int, object]]:
        """Every (connection, request id) waiting for this request's reply."""
        return [(c, r) for c, r in [(self.conn, self.rid), *self.retries] if c is not None]


class SendList:
    """SEND_LIST, per destination host, and per destination and priority: the Message-Sender serves
    each line by priority, each (destination, priority) stream in order. The blocks that may expire
    are also in a heap by their time, so finding the expired ones costs nothing while none is due."""

    def __init__(self) -> None:
        self._by_dest: dict[str, OrderedDict[int, MSGBLOK]] = defaultdict(OrderedDict)
        self._by_stream: dict[tuple[str, int], OrderedDict[int, MSGBLOK]] = defaultdict(OrderedDict)
        self._count = 0
        self._expiring: list[tuple[float, int, str]] = []  # (expires, seq, dest); stale ones skipped
        self.kept = 0  # custody copies (mccs.core.custody): out of this list's sight, but they take buffers

    def __len__(self) -> int:
        return self._count

    def __contains__(self, blk: MSGBLOK) -> bool:
        bucket = self._by_dest.get(blk.dest)
        return bucket is not None and bucket.get(blk.seq) is blk

    def add(self, blk: MSGBLOK) -> None:
        self._by_dest[blk.dest][blk.seq] = blk
        self._by_stream[blk.dest, blk.priority][blk.seq] = blk
        self._count += 1
        if blk.expires:
            heapq.heappush(self._expiring, (blk.expires, blk.seq, blk.dest))

    def expire_at(self, blk: MSGBLOK) -> None:
        """A block here got a new expiry (a void that owes a notice, mccs.core.notices)."""
        heapq.heappush(self._expiring, (blk.expires, blk.seq, blk.dest))

    def expired(self, wall: float) -> list[MSGBLOK]:
        """Blocks still here whose time has passed and that no line holds. One a line holds is
        looked at again a second later: if its acknowledgement comes, it has left."""
        due, busy = [], []
        while self._expiring and self._expiring[0][0] <= wall:
            _, seq, dest = heapq.heappop(self._expiring)
            bucket = self._by_dest.get(dest)
            blk = bucket.get(seq) if bucket is not None else None
            if blk is None or not blk.expires:  # gone already, or a void now
                continue
            if blk.state is BlockState.IN_FLIGHT:
                busy.append((wall + 1.0, seq, dest))
            else:
                due.append(blk)
        for entry in busy:
            heapq.heappush(self._expiring, entry)
        return due

    def next_expiry(self) -> float | None:
        return self._expiring[0][0] if self._expiring else None

    def remove(self, blk: MSGBLOK) -> None:
        bucket = self._by_dest.get(blk.dest)
        if bucket is not None and bucket.pop(blk.seq, None) is not None:
            self._count -= 1
            if not bucket:
                del self._by_dest[blk.dest]
            stream = self._by_stream[blk.dest, blk.priority]
            stream.pop(blk.seq, None)
            if not stream:
                del self._by_stream[blk.dest, blk.priority]
            if len(self._expiring) > 2 * self._count + 1024:  # mostly entries of blocks gone: rebuild
                self._expiring = [(b.expires, b.seq, b.dest) for q in self._by_dest.values() for b in q.values()
                                  if b.expires]
                heapq.heapify(self._expiring)

    def waiting(self) -> dict[str, int]:
        """Blocks per destination host."""
        return {dest: len(q) for dest, q in self._by_dest.items()}

    def oldest(self) -> dict[str, dict]:
        """Per destination host, its oldest block: the first in its order (blocks are added as stored)."""
        firsts = (next(iter(q.values())) for q in self._by_dest.values())
        return {b.dest: {"id": b.name, "stored": round(b.ts, 3), "size": b.size} for b in firsts}

    def queue(self, dest: str, priority: int) -> Iterator[MSGBLOK]:
        """The blocks for one destination of one priority, in order, lazily: do not change the
        list meanwhile."""
        return iter(self._by_stream.get((dest, priority), {}).values())

    def priorities(self) -> list[tuple[int, str]]:
        """(priority, destination) of every stream that has blocks, highest priority first."""
        return sorted(((p, d) for d, p in self._by_stream), reverse=True)

    def __iter__(self) -> Iterator[MSGBLOK]:
        return iter(sorted((b for bucket in self._by_dest.values() for b in bucket.values()), key=lambda b: b.seq))


class Mailbox:
    """One process's part of RECV_LIST: the blocks it may still be handed, in order, indexed by
    FROM_ID, USER_ID and priority so a RECV does not walk the others; handed blocks apart, and
    replies apart too: only the request they answer takes them, by the request's MSG_ID."""

    def __init__(self) -> None:
        self.ready: OrderedDict[int, MSGBLOK] = OrderedDict()
        self.by_from: dict[str, OrderedDict[int, MSGBLOK]] = defaultdict(OrderedDict)
        self.by_user: dict[int, OrderedDict[int, MSGBLOK]] = defaultdict(OrderedDict)
        self.by_priority: dict[int, OrderedDict[int, MSGBLOK]] = defaultdict(OrderedDict)
        self.replies: OrderedDict[int, MSGBLOK] = OrderedDict()  # REPLY blocks, by seq
        self.handed: dict[int, MSGBLOK] = {}

    def __len__(self) -> int:
        return len(self.ready) + len(self.handed) + len(self.replies)

    def put(self, blk: MSGBLOK) -> None:
        if blk.flags & REPLY:
            self.replies[blk.seq] = blk
            return
        for index in (self.ready, self.by_from[blk.from_id], self.by_user[blk.user_id],
                      self.by_priority[blk.priority]):
            index[blk.seq] = blk

    def take(self, blk: MSGBLOK) -> None:
        """Off the ready indexes (handed to a process, or gone)."""
        self.replies.pop(blk.seq, None)
        self.ready.pop(blk.seq, None)
        _unindex(self.by_from, blk.from_id, blk.seq)
        _unindex(self.by_user, blk.user_id, blk.seq)
        _unindex(self.by_priority, blk.priority, blk.seq)

    def restore_order(self) -> None:
        """Blocks given back (their process went away), or restored, go to their places again."""
        blocks = arrival_order([*self.ready.values(), *self.replies.values()])
        self.ready.clear()
        self.replies.clear()
        self.by_from.clear()
        self.by_user.clear()
        self.by_priority.clear()
        for blk in blocks:
            self.put(blk)

    def match(self, from_id: str, user_id: int, reply_to: int = 0) -> MSGBLOK | None:
        """The paper's RECV rule: the first ready MSGBLOK, by FROM_ID and USER_ID if given; with
        neither, the first of the highest priority; or the reply to this process's request
        `reply_to` (a MSG_ID)."""
        if reply_to:
            return next((blk for blk in self.replies.values() if blk.user_id == reply_to), None)
        if from_id.strip() and user_id:
            a: Mapping[int, MSGBLOK] = self.by_from.get(from_id, {})
            b: Mapping[int, MSGBLOK] = self.by_user.get(user_id, {})
            small, other = (a, b) if len(a) <= len(b) else (b, a)
            return next((blk for seq, blk in small.items() if seq in other), None)
        index = self.by_from.get(from_id) if from_id.strip() else self.by_user.get(user_id) if user_id \
            else self.by_priority.get(max(self.by_priority, default=0))
        return next(iter(index.values()), None) if index else None


def _unindex(index: dict[K, OrderedDict[int, MSGBLOK]], key: K, seq: int) -> None:
    """Block `seq` off one of a Mailbox's indexes (by FROM_ID, USER_ID or priority); an emptied bucket goes."""
    bucket = index.get(key)
    if bucket is not None:
        bucket.pop(seq, None)
        if not bucket:
            del index[key]


def arrival_order(blocks: Iterable[MSGBLOK]) -> list[MSGBLOK]:
    """Blocks by seq, the order they were stored in, except that those of one end-to-end stream
    keep their PSEQ order: one held for order was stored before the one that filled its gap."""
    blocks = sorted(blocks, key=lambda b: b.seq)
    streams: dict[tuple, list[MSGBLOK]] = defaultdict(list)
    for blk in blocks:
        if blk.pseq:
            streams[blk.stream, blk.epoch].append(blk)
    numbered = {key: iter(sorted(s, key=lambda b: b.pseq)) for key, s in streams.items()}
    return [next(numbered[blk.stream, blk.epoch]) if blk.pseq else blk for blk in blocks]


class RecvList:
    """RECV_LIST, a Mailbox per receiving process (TO_ID). An arrived message waits for its
    process however long it takes, but a reply only as long as its request waits: replies are
    also in a heap by their time (the ttl the request gave them)."""

    def __init__(self) -> None:
        self.boxes: dict[str, Mailbox] = defaultdict(Mailbox)
        self._count = 0
        self._expiring: list[tuple[float, int, MSGBLOK]] = []  # replies; ones gone already are skipped
        self._given_up: OrderedDict[tuple[str, int], None] = OrderedDict()  # (process, request MSG_ID), lately
        self.left: Counter[tuple[str, int]] = Counter()  # numbered messages taken, per stream (mccs.core.custody)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, blk: MSGBLOK) -> bool:
        box = self.boxes.get(blk.to_id)
        return box is not None and any(blk.seq in d for d in (box.ready, box.replies, box.handed))

    def add(self, blk: MSGBLOK) -> None:
        self.boxes[blk.to_id].put(blk)
        self._count += 1
        if blk.flags & REPLY and blk.expires:
            heapq.heappush(self._expiring, (blk.expires, blk.seq, blk))

    def late_replies(self, wall: float) -> list[MSGBLOK]:
        """Replies still waiting whose time has passed: their request has given up on them. One
        handed to its process is looked at again a second later (it may be given back)."""
        out: list[MSGBLOK] = []
        handed: list[MSGBLOK] = []
        while self._expiring and self._expiring[0][0] <= wall:
            blk = heapq.heappop(self._expiring)[2]
            if blk in self:
                (out if blk.state is BlockState.QUEUED else handed).append(blk)
        for blk in handed:
            heapq.heappush(self._expiring, (wall + 1.0, blk.seq, blk))
        return out

    def next_expiry(self) -> float | None:
        return self._expiring[0][0] if self._expiring else None

    def give_up(self, to_id: str, reply_to: int) -> None:
        """A request's wait for its reply timed out: a reply that comes now is late."""
        self._given_up[(to_id, reply_to)] = None
        if len(self._given_up) > GIVEN_UP_KEEP:
            self._given_up.popitem(last=False)

    def late(self, blk: MSGBLOK) -> bool:
        """A reply whose request gave up (while this daemon ran; else its ttl says)."""
        return bool(blk.flags & REPLY) and (blk.to_id, blk.user_id) in self._given_up

    def hand(self, blk: MSGBLOK, conn: int) -> None:
        box = self.boxes[blk.to_id]
        box.take(blk)
        box.handed[blk.seq] = blk
        blk.state, blk.holder = BlockState.HANDED, conn

    def give_back(self, blk: MSGBLOK) -> None:
        """Its process went away unconfirmed: ready again, in its place (call restore_order after)."""
        box = self.boxes[blk.to_id]
        box.handed.pop(blk.seq, None)
        blk.state, blk.holder = BlockState.QUEUED, None
        box.put(blk)

    def remove(self, blk: MSGBLOK) -> None:
        box = self.boxes.get(blk.to_id)
        if box is None:
            return
        if blk.state is BlockState.HANDED:  # off the ready indexes already (hand)
            box.handed.pop(blk.seq, None)
        else:
            box.take(blk)
        self._count -= 1
        if blk.pseq:
            self.left[blk.stream] += 1
        if not len(box):
            del self.boxes[blk.to_id]

    def match(self, to_id: str, from_id: str, user_id: int, reply_to: int = 0) -> MSGBLOK | None:
        box = self.boxes.get(to_id)
        return box.match(from_id, user_id, reply_to) if box is not None else None

    def __iter__(self) -> Iterator[MSGBLOK]:
        blocks = (b for box in self.boxes.values()
                  for b in itertools.chain(box.ready.values(), box.replies.values(), box.handed.values()))
        return iter(sorted(blocks, key=lambda b: b.seq))


class WaitList:
    """WAIT_LIST: SENDs in arrival order per list they wait for (SEND_LIST, or RECV_LIST for a
    local destination), batches of SENDs (send_many) in arrival order, RECVs per receiving process,
    and the RECVs' deadlines in a heap."""

    def __init__(self) -> None:
        self.remote_sends: deque[PRQBLOK] = deque()
        self.local_sends: deque[PRQBLOK] = deque()
        self.batches: deque[PRQBLOK] = deque()  # not kept in the checkpoint: a retry after a restart asks again
        self.fresh_sends: list[PRQBLOK] = []  # arrived since the last pass: made durable if they wait
        self.durable_sends = 0
        self.recvs: dict[str, deque[PRQBLOK]] = defaultdict(deque)
        self.dirty: set[str] = set()  # processes whose RECVs may match now
        self._deadlines: list[tuple[float, int, PRQBLOK]] = []
        self._tiebreak = itertools.count()

    def __len__(self) -> int:
        return (len(self.remote_sends) + len(self.local_sends) + len(self.batches)
                + sum(len(q) for q in self.recvs.values()))

    def add_send(self, prq: PRQBLOK, local: bool) -> None:
        (self.local_sends if local else self.remote_sends).append(prq)
        if prq.durable:
            self.durable_sends += 1
        else:
            self.fresh_sends.append(prq)

    def add_batch(self, prq: PRQBLOK) -> None:
        self.batches.append(prq)

    def add_recv(self, prq: PRQBLOK) -> None:
        self.recvs[prq.to_id].append(prq)
        self.dirty.add(prq.to_id)
        if prq.deadline is not None:
            heapq.heappush(self._deadlines, (prq.deadline, next(self._tiebreak), prq))

    def find_send(self, req: str) -> PRQBLOK | None:
        queues = (self.remote_sends, self.local_sends, self.batches)
        return next((p for q in queues for p in q if p.req == req and not p.done), None)

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def expired(self, now: float) -> list[PRQBLOK]:
        """RECVs whose deadline has passed (the caller answers them)."""
        out = []
        while self._deadlines and (self._deadlines[0][2].done or self._deadlines[0][0] <= now):
            prq = heapq.heappop(self._deadlines)[2]
            if not prq.done:
                out.append(prq)
        return out

    def drop_recvs(self, conn: int, name: str | None) -> None:
        """A connection went away: its waiting RECVs die with it (the library asks again)."""
        for prq in self.recvs.get(name, ()) if name else ():
            if prq.conn == conn:
                prq.done = True
        self.prune(name)

    def prune(self, name: str | None) -> None:
        """Drop answered RECVs from a process's queue (they leave the heap when they reach its top)."""
        if name is None:  # a connection that never said hello
            return
        queue = self.recvs.get(name)
        if queue is not None:
            kept = deque(p for p in queue if not p.done)
            if kept:
                self.recvs[name] = kept
            else:
                del self.recvs[name]


class Sequence:
    """The checkpoint order of blocks and waiting SENDs: one counter, stored once a pass."""

    def __init__(self, next_seq: int):
        self.next = next_seq
        self.dirty = False

    def take(self) -> int:
        seq, self.next, self.dirty = self.next, self.next + 1, True
        return seq


@dataclass
class Lists:
    send: SendList = field(default_factory=SendList)
    recv: RecvList = field(default_factory=RecvList)
    wait: WaitList = field(default_factory=WaitList)
    arrived: list[MSGBLOK] = field(default_factory=list)  # since the last pass: for observers, dispositions

    def arrive(self, blk: MSGBLOK) -> None:
        """A message for a process of this host: on RECV_LIST, and its waiting RECVs looked at."""
        self.recv.add(blk)
        self.wait.dirty.add(blk.to_id)
        self.arrived.append(blk)
