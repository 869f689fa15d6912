"""The operator's side of the lists (`mccs queue`): what each entry shows, which one an ID names,
and holding, releasing and purging messages, in the daemon's core.

An operator's request is carried out in the pass, after the acknowledgements that came in and
before the Message-Sender: its changes go in the pass's transaction like any other, and a block
held in a pass is handed to no line in it. A hold is a flag of the block (envelope.HELD, never
carried), so it is in the checkpoint and survives a restart.

A purge takes a message off its list, and its sender gets an undeliverable notice, as when its
ttl passes (a numbered one stays on SEND_LIST as a VOID, for its successors' order). A block a
line's machine holds unacknowledged, a whole message or a segment, cannot be taken back: it is
held at once (in the checkpoint) and purged in the first pass in which no line holds it. If
that piece completes it at the next host, it was delivered and is not purged.
"""
from __future__ import annotations

import logging
from typing import Iterator

from checkpoint import changes as ch
from checkpoint import store
from checkpoint.changes import CUSTODY, Table

from mccs.core.dispatcher import answer
from mccs.core.effects import Effects
from mccs.core.envelope import HELD, NOTICE, RECEIPT, VOID
from mccs.core.lines import Lines
from mccs.core.lists import MSGBLOK, PRQBLOK, BlockState
from mccs.core.notices import Notices
from mccs.core.pairs import PairsIn
from mccs.core.replies import AtHost, Failed, QueueEntry, QueueList, QueuePurge, QueueResult, Refused
from mccs.core.requests import Code, QueueRequest, Ref, RequestError
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.queue")

Item = MSGBLOK | PRQBLOK


def entry(item: Item, where: str, state: str, wall: float) -> dict:
    """One line of `mccs queue list`. A SEND waiting for a buffer has no MSG_ID yet, nor a stored
    time; one not yet in the checkpoint has no #SEQ either (id "-")."""
    if isinstance(item, PRQBLOK):
        return {"id": f"#{item.seq}" if item.seq else "-", "seq": item.seq, "list": where, "origin": None,
                "msg_id": None, "from": item.from_id.rstrip(), "to": item.to_id.rstrip(), "size": len(item.data),
                "age": None, "state": state, "kind": _kind(item.flags), "priority": item.priority}
    return {"id": item.name, "seq": item.seq, "list": where, "origin": item.origin, "msg_id": item.msg_id,
            "from": item.from_id.rstrip(), "to": item.to_id.rstrip(), "size": item.size,
            "age": round(max(0.0, wall - item.ts), 1), "state": state, "kind": _kind(item.flags),
            "priority": item.priority}


def _kind(flags: int) -> str:
    return "void" if flags & VOID else "notice" if flags & NOTICE else "receipt" if flags & RECEIPT else ""


def details(item: Item, base: dict) -> dict:
    """`mccs queue show`: the entry and the rest of what the block holds."""
    if isinstance(item, PRQBLOK):
        return {**base, "user_id": item.user_id, "ttl": item.ttl or None, "durable": item.durable}
    out = {**base, "user_id": item.user_id, "stored": round(item.ts, 3), "hops": item.hops, "pseq": item.pseq,
           "epoch": item.epoch, "expires": round(item.expires, 3) or None, "acked": item.acked,
           "line": item.line, "large": not isinstance(item.data, bytes)}
    if isinstance(item.data, bytes):
        out["preview"] = item.data[:200].decode("utf-8", "replace")
    return out


def matches(ref: Ref, host: str, e: dict) -> bool:
    if ref.seq:
        return e["seq"] == ref.seq
    return e["msg_id"] == ref.msg_id and e["origin"] == (ref.origin or host)


def select(ref: Ref, host: str, found: list[tuple[dict, Item]]) -> tuple[dict, Item]:
    """The one entry `ref` names; RequestError (bad_id) for none or several."""
    hits = [(e, item) for e, item in found if matches(ref, host, e)]
    if not hits:
        raise RequestError(Code.BAD_ID, f"no message {ref.text} on the lists of host {host} (see 'mccs queue list')")
    if len(hits) > 1:
        where = ", ".join(f"#{e['seq']} on {e['list']}" for e, _ in hits)
        raise RequestError(Code.BAD_ID, f"{ref.text} names {len(hits)} messages ({where}): give one as #SEQ")
    return hits[0]


def from_checkpoint(lists: store.Lists, wall: float) -> list[tuple[dict, Item]]:
    """The entries as the checkpoint holds them, for `mccs queue` while the daemon is down: what
    only the running daemon knows (in flight, too large, handed) is not there."""
    pairs = PairsIn(lists.pairs_in)
    out: list[tuple[dict, Item]] = []
    for p in lists.wait_list:
        prq = PRQBLOK.restored(p)
        out.append((entry(prq, "WAIT_LIST", "waiting", wall), prq))
    for row in lists.send_list:
        blk = MSGBLOK.from_row(row)
        state = "custody" if blk.flags & CUSTODY else "held" if blk.held else "waiting"  # (custody: delivered,
        out.append((entry(blk, "SEND_LIST", state, wall), blk))  # a copy kept until taken there, mccs.core.custody)
    for row in lists.recv_list:
        blk = MSGBLOK.from_row(row)
        out.append((entry(blk, "RECV_LIST", "held for order" if pairs.is_held(blk) else "waiting", wall), blk))
    return out


class Queue:
    """The operator's requests, queued by the kernel and carried out in its pass."""

    def __init__(self, hs: HostState, lines: Lines, notices: Notices):
        self.host, self.lists, self.lines, self.pairs_in, self.notices = hs.id, hs.lists, lines, hs.pairs.into, notices
        self.ops: list[tuple[int, object, QueueRequest]] = []  # (connection, request id, request)
        self.purging: list[MSGBLOK] = []  # purged while a line held a piece of them: held until it is back

    def run(self, fx: Effects, wall: float) -> None:
        self._finish_purges(fx, wall)
        ops, self.ops = self.ops, []
        for conn, rid, op in ops:
            try:
                result = getattr(self, f"_{op.action}")(op, fx, wall)
            except RequestError as e:
                result = Refused.of(e)
            fx.reply(conn, rid, AtHost(self.host, result))

    # -- what is on the lists ---------------------------------------------------------------------
    def entries(self, wall: float) -> list[tuple[dict, Item]]:
        wait = self.lists.wait
        out: list[tuple[dict, Item]] = [(entry(p, "WAIT_LIST", "waiting", wall), p)
                                        for q in (wait.remote_sends, wait.local_sends) for p in q if not p.done]
        out += [(entry(b, "SEND_LIST", self._send_state(b), wall), b) for b in self.lists.send]
        out += [(entry(b, "RECV_LIST", "handed" if b.state is BlockState.HANDED else "waiting", wall), b)
                for b in self.lists.recv]
        out += [(entry(b, "RECV_LIST", "held for order", wall), b) for b in self._held_for_order()]
        return out

    def _held_for_order(self) -> Iterator[MSGBLOK]:
        return (b for pair in self.pairs_in.pairs.values() for b in pair.held.values())

    def _send_state(self, blk: MSGBLOK) -> str:
        if blk in self.purging:
            return "purging"
        if blk.held:
            return "held"
        if any(lcb.held is blk for lcb in self.lines.lcbs.values()):
            return "too large"  # for the peer's max_message: it, and every message after it for that host, waits
        return "in flight" if blk.state is BlockState.IN_FLIGHT else "waiting"

    def _entry(self, ref: Ref, wall: float) -> tuple[dict, Item]:
        return select(ref, self.host, self.entries(wall))

    # -- the actions ------------------------------------------------------------------------------
    def _list(self, op: QueueRequest, fx: Effects, wall: float) -> QueueResult:
        found = self.entries(wall)
        return QueueList(tuple(e for e, _ in found[:op.limit]), max(0, len(found) - op.limit))

    def _show(self, op: QueueRequest, fx: Effects, wall: float) -> QueueResult:
        assert op.ref is not None  # requests._queue: show takes one message id
        e, item = self._entry(op.ref, wall)
        return QueueEntry(details(item, e))

    def _hold(self, op: QueueRequest, fx: Effects, wall: float) -> QueueResult:
        blk = self._on_send_list(op, wall, "held")
        self._set_held(blk, True, fx)
        note = "a piece of it is on the line now: that piece goes on, nothing more of it until released" \
            if self.lines.carrying(blk) else ""
        return QueueEntry(entry(blk, "SEND_LIST", self._send_state(blk), wall), note)

    def _release(self, op: QueueRequest, fx: Effects, wall: float) -> QueueResult:
        blk = self._on_send_list(op, wall, "released")
        note = "" if blk.held else "it was not held"
        if blk in self.purging:
            self.purging.remove(blk)
            note = "its purge, waiting for the line to give it back, is called off"
        self._set_held(blk, False, fx)
        return QueueEntry(entry(blk, "SEND_LIST", self._send_state(blk), wall), note)

    def _on_send_list(self, op: QueueRequest, wall: float, verb: str) -> MSGBLOK:
        assert op.ref is not None  # requests._queue: hold and release take one message id
        e, item = self._entry(op.ref, wall)
        if e["list"] != "SEND_LIST":
            also = "; a SEND waiting for a buffer can be purged" if e["list"] == "WAIT_LIST" else ""
            raise RequestError(Code.BAD_ID, f"{op.ref.text} is on {e['list']}: only a message on SEND_LIST (on its way "
                                         f"to a line) is {verb}{also}")
        assert isinstance(item, MSGBLOK)  # what is on SEND_LIST is a block (a waiting SEND is on WAIT_LIST)
        return item

    def _set_held(self, blk: MSGBLOK, on: bool, fx: Effects) -> None:
        flags = blk.flags | HELD if on else blk.flags & ~HELD
        if flags != blk.flags:
            blk.flags = flags
            fx.change(ch.set_flags(Table.SEND_LIST, blk.seq, flags))
            log.info("%s: %s %s", self.host, "held" if on else "released", blk.name)

    def _purge(self, op: QueueRequest, fx: Effects, wall: float) -> QueueResult:
        if op.ref is not None:
            chosen = [self._entry(op.ref, wall)]
        else:
            chosen = [(e, item) for e, item in self.entries(wall)
                      if (not op.to or e["to"][:2] == op.to)
                      and (op.older_than is None or (e["age"] is not None and e["age"] > op.older_than))]
        done: dict[str, list] = {"purged": [], "pending": [], "skipped": []}
        for e, item in chosen:
            why = self._cannot_purge(e)
            if why and op.ref is not None:
                raise RequestError(Code.NOT_PURGED, f"{op.ref.text} is not purged: {why}")
            if why:
                done["skipped"].append({"id": e["id"], "why": why})
            else:
                done[self._purge_one(e, item, fx, wall)].append(e["id"])
        return QueuePurge(tuple(done["purged"]), tuple(done["pending"]), tuple(done["skipped"]))

    def _cannot_purge(self, e: dict) -> str:
        if e["id"] == "-":
            return "a SEND waiting for a buffer, not yet in the checkpoint: it gets its #SEQ in a moment"
        if e["kind"] == "void":
            return "a void keeps its place in its origin's order and has no text to purge"
        if e["state"] == "handed":
            return f"handed to process {e['to']}, whose confirm is awaited"
        if e["state"] == "held for order":
            return f"it waits for an earlier message of {e['origin']} to arrive; it is delivered after that one"
        if e["state"] == "purging":
            return "its purge waits for the line to give it back"
        return ""

    def _purge_one(self, e: dict, item: Item, fx: Effects, wall: float) -> str:
        """Purged now ("purged"), or once no line holds a piece of it ("pending")."""
        if isinstance(item, PRQBLOK):  # not stored: its SEND is answered, no MSG_ID, no notice
            fx.change(ch.delete_waiting(item.req))
            self.lists.wait.durable_sends -= 1
            answer(fx, item, Failed(Code.PURGED, f"the SEND was purged by the operator at {self.host}"))
            self.notices.counters["purged"] += 1
        elif e["list"] == "SEND_LIST":
            if self.lines.carrying(item):
                self._set_held(item, True, fx)  # in the checkpoint: a restart before the purge leaves it held
                self.purging.append(item)
                return "pending"
            self._drop(fx, item, wall)
        else:
            self.notices.untaken(fx, item, "purged", wall)
        log.info("%s: purged %s", self.host, e["id"])
        return "purged"

    def _drop(self, fx: Effects, blk: MSGBLOK, wall: float) -> None:
        """Off SEND_LIST (a void if numbered)."""
        self.lines.give_up(blk, fx)
        self.notices.drop(fx, blk, "purged", wall)

    def _finish_purges(self, fx: Effects, wall: float) -> None:
        for blk in list(self.purging):
            if blk not in self.lists.send or blk.flags & VOID:  # delivered meanwhile, or expired into a void
                self.purging.remove(blk)
            elif not self.lines.carrying(blk):
                self.purging.remove(blk)
                self._drop(fx, blk, wall)
                log.info("%s: purged %s (the line gave it back)", self.host, blk.name)
