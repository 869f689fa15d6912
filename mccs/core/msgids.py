"""MSG_IDs: which id a new message gets, and which arrivals are duplicates.

A receiver drops an arrival whose (origin, MSG_ID) is among the last DUP_WINDOW keys it got
from that origin (docs/DESIGN.md section 5). MSG_IDs are 16 bits, so that rule alone cannot tell a
retransmission from a new message whose id the origin reused after a wrap. The origin makes the
rule exact by never giving a message for host D an id that is

- in use: on its own SEND_LIST or RECV_LIST (so an acknowledgement or a confirm finds exactly
  one message), nor
- among the last DUP_WINDOW ids it gave to messages for D (the ids D may still hold in its
  window: D receives the origin's messages for it in the order they were accepted).

While more than MAX_IN_USE ids are in use a SEND waits for a buffer (back-pressure), so a free
id always exists. Every structure here is pure: the changes to store come back as data.
"""
from __future__ import annotations

from collections import Counter, defaultdict, deque
from typing import Iterable

from checkpoint import changes as ch
from checkpoint.changes import Change, Table

ID_SPACE = 65535  # MSG_IDs are 1..65535
DUP_WINDOW = 8192  # keys per origin (receiver) and per destination (sender)
MAX_IN_USE = ID_SPACE - DUP_WINDOW - 1  # own messages waiting anywhere on this host, at most


class KeyWindow:
    """The last DUP_WINDOW MSG_IDs per host, in order, mirrored in one checkpoint table."""

    def __init__(self, table: Table, keys: Iterable[tuple[str, int]] = ()):
        self.table = table
        self._order: dict[str, deque[int]] = defaultdict(deque)
        self._set: set[tuple[str, int]] = set()
        for host, msg_id in keys:
            self._remember(host, msg_id)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._set

    def add(self, host: str, msg_id: int, seq: int) -> list[Change]:
        out = [ch.add_key(self.table, host, msg_id, seq)]
        for old in self._remember(host, msg_id):
            out.append(ch.delete_key(self.table, host, old))
        return out

    def hosts(self) -> list[str]:
        return list(self._order)

    def forget(self, host: str) -> list[Change]:
        """Every key of `host`: its checkpoint was started afresh, so its ids name new messages
        (or, for the sent window, it holds none of ours any more)."""
        for msg_id in self._order.pop(host, ()):
            self._set.discard((host, msg_id))
        return [ch.delete_keys(self.table, host)]

    def _remember(self, host: str, msg_id: int) -> list[int]:
        """Keep the newest DUP_WINDOW keys of `host`; returns the ids that fell out."""
        order = self._order[host]
        if (host, msg_id) in self._set:  # the same id again (a reuse after 57,342 others): move it to the end
            order.remove(msg_id)
        order.append(msg_id)
        self._set.add((host, msg_id))
        evicted = []
        while len(order) > DUP_WINDOW:
            old = order.popleft()
            self._set.discard((host, old))
            evicted.append(old)
        return evicted


class MsgIds:
    """The origin's MSG_ID counter and the ids in use; see the module docstring."""

    def __init__(self, host: str, next_id: int, sent: Iterable[tuple[str, int]] = ()):
        self.host = host
        self.next_id = next_id
        self.in_use: Counter[int] = Counter()
        self.sent = KeyWindow(Table.SENT_WINDOW, sent)
        self.dirty = False

    @property
    def full(self) -> bool:
        return len(self.in_use) >= MAX_IN_USE

    def room(self, n: int) -> bool:
        """Can `n` more messages get an id now (a batch stored as a whole)?"""
        return len(self.in_use) + n <= MAX_IN_USE

    def hold(self, msg_id: int) -> None:
        """A message of this origin is on one of the lists."""
        self.in_use[msg_id] += 1

    def release(self, msg_id: int) -> None:
        self.in_use[msg_id] -= 1
        if self.in_use[msg_id] <= 0:
            del self.in_use[msg_id]

    def allocate(self, dest: str, seq: int) -> tuple[int, list[Change]]:
        """A free MSG_ID for a message to host `dest` (this host for a local one), held.
        Call only when not `full`: then one is found within ID_SPACE steps, usually the first."""
        local = dest == self.host
        for _ in range(ID_SPACE):
            msg_id = self.next_id
            self.next_id = msg_id % ID_SPACE + 1
            if msg_id not in self.in_use and (local or (dest, msg_id) not in self.sent):
                break
        else:
            raise RuntimeError("no free MSG_ID although fewer than MAX_IN_USE are in use")
        self.hold(msg_id)
        self.dirty = True
        changes = [] if local else self.sent.add(dest, msg_id, seq)
        return msg_id, changes

    def flush(self) -> list[Change]:
        """The counter, once per pass that moved it."""
        if not self.dirty:
            return []
        self.dirty = False
        return [ch.set_meta("next_msg_id", self.next_id)]
