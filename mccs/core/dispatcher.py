"""The Process-Dispatcher: one pass over WAIT_LIST (paper, Part II).

A SEND builds a MSGBLOK on SEND_LIST (or straight on RECV_LIST for a process on this host), or
stays on WAIT_LIST while that list is full or every free MSG_ID is in use. A RECV takes the
first eligible MSGBLOK of its process name's mailbox (the handlers of a name ask in turn), or
of the copies its connection observes, or only the reply to its request; it answers "nothing"
(no-wait, or its timeout passed: a request's reply that comes later is late), or stays. Only the
processes whose mailbox or RECVs changed are looked at, so a pass
costs the same however many RECVs wait. Changes, trace events and replies go into the pass's
Effects; the shell commits the changes before it sends the replies.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from checkpoint import changes as ch
from checkpoint.changes import INLINE_MAX, Stored, Table

from linedrivers.ids import host_of

from mccs.core.effects import Effects
from mccs.core.envelope import FAILED, REPLY, Envelope, to_wire
from mccs.core.lists import MSGBLOK, PRQBLOK, RecvList
from mccs.core.notices import fields
from mccs.core.replies import NOTHING, Accepted, AcceptedMany, Body, Message, Received
from mccs.core.segments import crc_of
from mccs.core import e2e, envelope
from mccs.core.e2e import Keyring
from mccs.core.sessions import Session, Sessions
from mccs.core.host import HostState


def message(blk: MSGBLOK, wall: float, keys: Keyring, copy: bool = False) -> Message:
    """A message for a RECV's reply (a copy for an observer has no rid: nothing to confirm).
    `ttl`: the seconds its sender still waits (a request's reply is sent with no more). A sealed
    message in segments is kept encrypted: the shell opens it as it sends it (`opening`)."""
    opening = e2e.opening(keys, e2e.Header.of(blk, envelope.of_stored(blk)), blk.seal) \
        if isinstance(blk.data, Stored) and blk.seal else None
    return Message(None if copy else blk.seq, blk.from_id, blk.to_id, blk.msg_id, blk.user_id, blk.data,
                   round(max(0.0, blk.expires - wall), 3) if blk.expires else None,
                   bool(blk.flags & REPLY), not blk.flags & FAILED, copy, str(e2e.mode_of(blk.flags)), opening)


def answer(fx: Effects, prq: PRQBLOK, body: Body) -> None:
    """`body` answers the request `prq`, and its retries (asked again while it waited)."""
    prq.done = True
    for conn, rid in prq.answers():
        fx.reply(conn, rid, body)


class ProcessDispatcher:
    def __init__(self, hs: HostState, sessions: Sessions, over_quota: Callable[[str], bool]):
        """`over_quota(to_id)`: does that process of this host have its max_waiting messages?"""
        self.host, self.buffers, self.ttl, self.blobs = hs.id, hs.cfg.buffers, hs.cfg.ttl, hs.blobs
        self.over_quota = over_quota
        self.keys, self.e2e_mode, self.whole_max = hs.keys, e2e.SETTING[hs.cfg.e2e], e2e.whole_max(hs.cfg)
        self.lists, self.ids, self.seqs, self.sessions, self.counters = hs.lists, hs.ids, hs.seqs, sessions, hs.counters

    def sends(self, fx: Effects, wall: float) -> None:
        wait = self.lists.wait
        self._sends(wait.remote_sends, False, fx, wall)
        self._sends(wait.local_sends, True, fx, wall)
        self._batches(wait.batches, fx, wall)
        self._keep_waiting_sends(fx)

    def recvs(self, fx: Effects, now: float, wall: float) -> None:
        wait = self.lists.wait
        while wait.dirty:
            self._recvs(wait.dirty.pop(), fx, wall)
        for prq in wait.expired(now):
            answer(fx, prq, NOTHING)
            wait.prune(prq.to_id)
            if prq.reply_to:
                self.lists.recv.give_up(prq.to_id, prq.reply_to)

    # -- SEND -------------------------------------------------------------------------------
    def _sends(self, queue: deque[PRQBLOK], local: bool, fx: Effects, wall: float) -> None:
        """In order while there is room; a SEND for a process of this host at its quota waits (with
        every later one for it), the others go on."""
        target = self.lists.recv if local else self.lists.send
        kept: list[PRQBLOK] = []
        while queue:
            prq = queue[0]
            if not prq.done:
                if len(target) + (0 if local else self.lists.send.kept) >= self.buffers or self.ids.full:
                    break
                if local and self.over_quota(prq.to_id):
                    kept.append(prq)
                else:
                    self._store(prq, local, fx, wall)
            queue.popleft()
        queue.extendleft(reversed(kept))

    def _batches(self, queue: deque[PRQBLOK], fx: Effects, wall: float) -> None:
        """In order, each as a whole once all of it fits: its changes go into this pass's one commit."""
        while queue:
            batch = queue[0]
            if not batch.done:
                local = [host_of(p.to_id) == self.host for p in batch.batch]
                if not self._fits(batch.batch, local):
                    break
                msg_ids = [self._store(p, is_local, fx, wall) for p, is_local in zip(batch.batch, local)]
                answer(fx, batch, AcceptedMany(tuple(msg_ids)))
            queue.popleft()

    def _fits(self, sends: list[PRQBLOK], local: list[bool]) -> bool:
        n_local = sum(local)
        return (len(self.lists.recv) + n_local <= self.buffers
                and len(self.lists.send) + self.lists.send.kept + len(sends) - n_local <= self.buffers
                and self.ids.room(len(sends))
                and not any(self.over_quota(p.to_id) for p, is_local in zip(sends, local) if is_local))

    def _store(self, prq: PRQBLOK, local: bool, fx: Effects, wall: float) -> int:
        seq = self.seqs.take()
        msg_id, id_changes = self.ids.allocate(host_of(prq.to_id), seq)
        table = Table.RECV_LIST if local else Table.SEND_LIST
        blk = MSGBLOK(seq, prq.to_id, prq.from_id, msg_id, prq.user_id or msg_id, prq.data, wall,
                      expires=wall + prq.ttl if prq.ttl else 0.0 if local else wall + self.ttl, flags=prq.flags,
                      priority=prq.priority)
        if (not local and self.e2e_mode is not e2e.Mode.NONE and len(prq.data) > self.whole_max
                and self.keys.trusts(host_of(prq.to_id))):  # it goes in
            # segments: signed or sealed as a whole now, while the text is in memory (docs/E2E.md)
            prq.data, blk.seal = e2e.seal_whole_text(self.keys, self.e2e_mode, e2e.Header.of(blk, Envelope(
                flags=to_wire(blk.flags), priority=blk.priority)), prq.data)
            blk.data = prq.data
        if len(prq.data) > INLINE_MAX:  # a large message: in the checkpoint only, from this pass's commit on
            blk.crc = crc_of(prq.data)
            blk.data = Stored(seq, len(prq.data), blk.crc)
            self.blobs.add(blk.data, prq.data)
            fx.change(*ch.add_text(seq, prq.data))
        fx.change(*id_changes, ch.add_block(table, blk), ch.send_done(prq.req, seq, msg_id, prq.to_id))
        prq.data = b""
        if prq.durable:
            fx.change(ch.delete_waiting(prq.req))
            self.lists.wait.durable_sends -= 1
        fx.trace("msg", "accepted", **fields(blk))
        self.counters["accepted"] += 1
        if local:
            self.counters["local"] += 1
            self.lists.arrive(blk)
            fx.trace("msg", "received", **fields(blk))
        else:
            self.lists.send.add(blk)
        answer(fx, prq, Accepted(msg_id, prq.to_id))
        return msg_id

    def _keep_waiting_sends(self, fx: Effects) -> None:
        """SENDs that wait for a buffer are kept in the checkpoint, so a retry after a restart
        finds them, up to `buffers` of them: WAIT_LIST is bounded like the other lists."""
        wait = self.lists.wait
        for prq in wait.fresh_sends:
            if not prq.done and not prq.durable and wait.durable_sends < self.buffers:
                prq.durable = True
                prq.seq = self.seqs.take()
                wait.durable_sends += 1
                fx.change(ch.add_waiting(prq.pending()))
        wait.fresh_sends.clear()

    # -- RECV -------------------------------------------------------------------------------
    def _recvs(self, key: str, fx: Effects, wall: float) -> None:
        """The waiting RECVs of one process name (its handlers', in arrival order: the first to ask
        gets the first message), or of one observer, against the mailbox and the copies."""
        wait, recv = self.lists.wait, self.lists.recv
        for prq in wait.recvs.get(key, ()):
            if prq.done:
                continue
            assert prq.conn is not None  # a RECV dies with its connection (WaitList.drop_recvs)
            session = self.sessions.by_conn[prq.conn]
            name = session.name
            assert name is not None  # RECV is NAMED: refused before hello (Kernel.request)
            blk = recv.match(name, prq.from_id, prq.user_id, prq.reply_to) \
                if session.handler or prq.reply_to else None
            copy = self._copy(session, prq, recv)
            if copy is not None and (blk is None or copy.seq < blk.seq):
                session.copies.remove(copy)
                answer(fx, prq, Received(message(copy, wall, self.keys, copy=True)))
            elif blk is not None:
                msgs = [self._hand(blk, session, prq, wall)]
                while len(msgs) < prq.most and not isinstance(blk.data, Stored) and not session.copies:
                    blk = recv.match(name, "", 0, 0)
                    if blk is None or isinstance(blk.data, Stored):  # a large text goes alone, read as written
                        break
                    msgs.append(self._hand(blk, session, prq, wall))
                answer(fx, prq, Received(msgs[0], tuple(msgs[1:])))
            elif not prq.wait:
                answer(fx, prq, NOTHING)
        wait.prune(key)

    def _hand(self, blk: MSGBLOK, session: Session, prq: PRQBLOK, wall: float) -> Message:
        self.lists.recv.hand(blk, session.conn)  # (the RECV's connection)
        session.handed[blk.seq] = blk
        return message(blk, wall, self.keys)

    def _copy(self, session: Session, prq: PRQBLOK, recv: RecvList) -> MSGBLOK | None:
        """The first copy for this RECV; a large text's copy only while its message is here (its
        text is read from the checkpoint)."""
        while session.copies and not prq.reply_to:
            copy = session.copy(prq.from_id, prq.user_id)
            if copy is None or not isinstance(copy.data, Stored) or copy in recv:
                return copy
            session.copies.remove(copy)
            self.counters["copies_missed"] += 1
        return None
