"""The Process-Dispatcher: one pass over WAIT_LIST (paper, Part II).

A SEND builds a MSGBLOK on SEND_LIST (or straight on RECV_LIST for a process on this host), or
stays on WAIT_LIST while that list is full. A RECV takes the first eligible MSGBLOK of RECV_LIST,
answers "nothing" (no-wait, or its timeout passed), or stays. All changes go into the pass's
transaction; replies and trace events are queued by the daemon until it has committed.
"""
from __future__ import annotations

import time

from checkpoint.store import PendingSend

from .lists import MSGBLOK, PRQBLOK


class ProcessDispatcher:
    def __init__(self, daemon):
        self.d = daemon

    def run(self, now: float) -> None:
        d = self.d
        while True:
            before = len(d.lists.recv)
            remaining = [prq for prq in d.lists.wait if not self._dispatch(prq, now)]
            d.lists.wait = remaining
            # A local SEND may have fed a RECV examined before it: a second look (paper, footnote 7).
            if len(d.lists.recv) <= before or not any(p.op == "recv" for p in remaining):
                return

    def _dispatch(self, prq: PRQBLOK, now: float) -> bool:
        """True when the request is finished and leaves WAIT_LIST."""
        return self._send(prq) if prq.op == "send" else self._recv(prq, now)

    def _send(self, prq: PRQBLOK) -> bool:
        d = self.d
        local = prq.to_id[:2] == d.host
        target, table = (d.lists.recv, "recv_list") if local else (d.lists.send, "send_list")
        if len(target) >= d.cfg.buffers:
            if not prq.durable:  # waits for a buffer, kept so a retry after a restart finds it
                d.cp.add_waiting(PendingSend(prq.req, prq.from_id, prq.to_id, prq.user_id, prq.data))
                prq.durable = True
            return False
        msg_id = d.allocate_msg_id()
        blk = MSGBLOK(d.cp.next_seq(), prq.to_id, prq.from_id, msg_id, prq.user_id or msg_id, prq.data, time.time())
        target.add(blk)
        d.cp.add(table, blk.row())
        d.cp.send_done(prq.req, msg_id, prq.to_id)
        if prq.durable:
            d.cp.delete_waiting(prq.req)
        d.committed(blk)
        d.after_commit_trace("accepted", blk)
        if local:
            d.after_commit_trace("received", blk)
            d.counters["local"] += 1
        d.counters["accepted"] += 1
        d.answer(prq, {"ok": True, "msg_id": msg_id, "to": prq.to_id})
        return True

    def _recv(self, prq: PRQBLOK, now: float) -> bool:
        d = self.d
        conn = prq.conn
        if conn is None or conn.closed:
            return True
        blk = d.lists.recv.match(prq.to_id, prq.from_id, prq.user_id)
        if blk is not None:
            blk.active, blk.holder = True, conn
            conn.handed[blk.seq] = blk
            d.answer(prq, {"ok": True, "msg": d.message_dict(blk)})
            return True
        if not prq.wait or (prq.deadline is not None and now >= prq.deadline):
            d.answer(prq, {"ok": True, "msg": None})
            return True
        return False
