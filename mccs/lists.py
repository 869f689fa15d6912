"""The paper's control blocks and its three lists, held in memory and mirrored in the checkpoint.

SEND_LIST holds MSGBLOKs accepted here and not yet acknowledged by the next host; RECV_LIST holds
MSGBLOKs arrived here (from a line or a local SEND) and not yet taken by RECV; WAIT_LIST holds
PRQBLOKs, the pending SEND and RECV requests of connected processes.
"""
from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

from checkpoint.store import Row


@dataclass(eq=False)
class MSGBLOK:
    seq: int  # checkpoint order, kept across restarts
    to_id: str
    from_id: str
    msg_id: int
    user_id: int
    data: bytes
    ts: float  # when accepted at the origin (local clock)
    active: bool = False  # SEND_LIST: handed to a line; RECV_LIST: handed to a process, confirm awaited
    durable: bool = False  # committed: only then may it leave the daemon
    holder: Any = None  # RECV_LIST: the connection it was handed to
    sent: bool = False  # SEND_LIST: traced as sent on a line

    @classmethod
    def from_row(cls, row: Row) -> "MSGBLOK":
        return cls(row.seq, row.to_id, row.from_id, row.msg_id, row.user_id, row.data, row.ts, durable=True)

    def row(self) -> Row:
        return Row(self.seq, self.to_id, self.from_id, self.msg_id, self.user_id, self.data, self.ts)

    @property
    def origin(self) -> str:
        return self.from_id[:2]

    @property
    def key(self) -> tuple[str, int]:
        return (self.from_id[:2], self.msg_id)


@dataclass(eq=False)
class PRQBLOK:
    """A process request waiting on WAIT_LIST: a SEND that found no buffer, or a RECV."""
    op: str  # "send" or "recv"
    conn: Any  # the process connection to answer; None for a restored SEND whose process is gone
    rid: Any  # the request's id on that connection, echoed in the reply
    from_id: str  # SEND: the sender (set by the daemon); RECV: the FROM_ID selection ("" = any)
    to_id: str = ""  # SEND: destination; RECV: the receiving process
    user_id: int = 0
    data: bytes = b""
    req: str = ""  # SEND: the client's random request id
    wait: bool = True  # RECV: STATUS 0
    deadline: float | None = None  # RECV: give up (answer "nothing") at this monotonic time
    durable: bool = False  # SEND: stored in the checkpoint's wait_list
    retries: list = field(default_factory=list)  # SEND: (conn, rid) of the same request asked again meanwhile


class BlockList:
    """An ordered list of MSGBLOKs, indexed by a key function for the lookups its users make."""

    def __init__(self, index_of):
        self._index_of = index_of
        self._by_index: dict[str, OrderedDict[int, MSGBLOK]] = defaultdict(OrderedDict)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, blk: MSGBLOK) -> None:
        self._by_index[self._index_of(blk)][blk.seq] = blk
        self._count += 1

    def remove(self, blk: MSGBLOK) -> None:
        bucket = self._by_index[self._index_of(blk)]
        if bucket.pop(blk.seq, None) is not None:
            self._count -= 1
        if not bucket:
            del self._by_index[self._index_of(blk)]

    def of(self, index: str) -> Iterator[MSGBLOK]:
        """The blocks under one index value, in order."""
        return iter(list(self._by_index.get(index, {}).values()))

    def __iter__(self) -> Iterator[MSGBLOK]:
        blocks = [b for bucket in self._by_index.values() for b in bucket.values()]
        return iter(sorted(blocks, key=lambda b: b.seq))


class SendList(BlockList):
    """SEND_LIST, indexed by destination host: the Message-Sender serves each line in order."""

    def __init__(self):
        super().__init__(lambda b: b.to_id[:2])
        self.by_msg_id: dict[int, MSGBLOK] = {}

    def add(self, blk: MSGBLOK) -> None:
        super().add(blk)
        self.by_msg_id[blk.msg_id] = blk

    def remove(self, blk: MSGBLOK) -> None:
        super().remove(blk)
        if self.by_msg_id.get(blk.msg_id) is blk:
            del self.by_msg_id[blk.msg_id]


class RecvList(BlockList):
    """RECV_LIST, indexed by the receiving process (TO_ID)."""

    def __init__(self):
        super().__init__(lambda b: b.to_id)
        self.keys: Counter = Counter()  # (origin, MSG_ID) on the list

    def add(self, blk: MSGBLOK) -> None:
        super().add(blk)
        self.keys[blk.key] += 1

    def remove(self, blk: MSGBLOK) -> None:
        super().remove(blk)
        self.keys[blk.key] -= 1
        if self.keys[blk.key] <= 0:
            del self.keys[blk.key]

    def match(self, to_id: str, from_id: str, user_id: int) -> MSGBLOK | None:
        """The paper's RECV rule: first eligible MSGBLOK for this process, by FROM_ID and USER_ID."""
        for blk in self._by_index.get(to_id, {}).values():
            if blk.active:
                continue
            if from_id.strip() and blk.from_id != from_id:
                continue
            if user_id and blk.user_id != user_id:
                continue
            return blk
        return None


@dataclass
class Lists:
    send: SendList = field(default_factory=SendList)
    recv: RecvList = field(default_factory=RecvList)
    wait: list[PRQBLOK] = field(default_factory=list)
