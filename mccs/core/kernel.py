"""The MCCS host: the daemon's core as a sans-I/O machine (paper, Figure 2).

Inputs go in (a process request, a connection opened or closed, bytes from a line, a port's
state, the clock); `run_pass()` returns the pass's Effects: checkpoint changes, trace events,
replies and bytes for the lines, in the order the shell must perform them. No socket, thread,
file or clock in here, so every rule of the daemon can be tested in memory.

The data path reads in one direction: SEND -> WAIT_LIST -> Process-Dispatcher -> SEND_LIST ->
Message-Sender -> line -> Message-Receiver -> RECV_LIST -> Process-Dispatcher -> RECV.
"""
from __future__ import annotations

import logging
from typing import Callable

from checkpoint import changes as ch
from checkpoint.changes import CUSTODY, Stored, Table
from checkpoint.changes import Restored
from linedrivers.ids import host_of

from mccs.config import HostConfig, LineConfig
from mccs.core.control import Control
from mccs.core.custody import Custody
from mccs.core.dispatcher import ProcessDispatcher, answer
from mccs.core.e2e import Keyring
from mccs.core.effects import Effects
from mccs.core.lines import Lines
from mccs.core.lists import MSGBLOK, PRQBLOK, Lists, Op, Sequence
from mccs.core.machine import LineMachine, make_machine
from mccs.core.envelope import FAILED, RECEIPT, REPLY, VOID
from mccs.core.epochs import PeerEpochs
from mccs.core.msgids import KeyWindow, MsgIds
from mccs.core.notices import NAME as NOTICE_NAME
from mccs.core.notices import Notices, fields
from mccs.core.pairs import Pairs, PairsIn, PairsOut
from mccs.core.receiver import UNCHECKED, MessageReceiver
from mccs.core.routing import RoutingTable
from mccs.core.segments import Blobs, Forgets, Partial, Reassembly
from mccs.core.queue import Queue
from mccs.core.replies import (NOTHING, Accepted, AcceptedMany, Alive, Cancelled, Confirmed, Failed, Observing,
                               Refused, Welcome)
from mccs.core.requests import (NAMED, Cancel, Code, Confirm, Hello, LineRequest, Observe, Ping, QueueRequest, Recv,
                                Request,
                       RequestError, Send, SendMany)
from mccs.core.delivery import Delivery
from mccs.core.sessions import Creds, Session, Sessions
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.kernel")

SEND_DONE_KEEP = 65536  # finished SEND request ids remembered for retries
SEND_DONE_TRIM = 4096  # trimmed every this many SENDs
#: Seconds the confirms a waiting RECV carries may wait to be committed with a pass that has
#: something to do (see Kernel.request): its reply, which the process waits for, comes after.
CONFIRM_WAIT = 1.0


class Kernel:
    def __init__(self, cfg: HostConfig, state: Restored,
                 new_machine: Callable[[LineConfig], LineMachine] | None = None,
                 random_bytes: Callable[[int], bytes] | None = None, keys: Keyring | None = None):
        """`random_bytes(n)` is the line machines' random source (the shell's; None: secrets). The
        pieces of large messages the lines need come in through `pieces_read` (Effects.reads).
        `keys`: the host's end-to-end keys, as the shell read them (mccs.daemon.keys); `keys_changed` later."""
        self.cfg = cfg
        self.host = cfg.id
        self.epoch = state.epoch
        self.disk_full = False
        hs = HostState(cfg, Lists(), MsgIds(self.host, state.next_msg_id, state.sent_keys), Sequence(state.next_seq),
                       Pairs(state.epoch, PairsOut(state.pairs_out, state.custody_out),
                             PairsIn(state.pairs_in, state.custody_in, state.gaps, state.retired)),
                       RoutingTable(self.host, [lc.peer for lc in cfg.lines], {r.to: r.via for r in cfg.routes},
                                    cfg.routing == "auto", state.known_hosts,
                                    {lc.peer for lc in cfg.lines if lc.protocol == "bsc"},
                                    {lc.peer for lc in cfg.lines if lc.is_call}, cfg.hop_limit),
                       Blobs(), keys=keys or Keyring(cfg.id))
        self.keys = hs.keys
        self.counters, self.lists, self.seqs, self.ids = hs.counters, hs.lists, hs.seqs, hs.ids
        self.pairs, self.routes, self.blobs = hs.pairs, hs.routes, hs.blobs
        self.dups = KeyWindow(Table.DUP_WINDOW, state.dup_keys)
        self.sessions = Sessions(cfg.processes, cfg.strict_names)
        self.reassembly = Reassembly(cfg.max_message, [Partial(*p) for p in state.partials], state.seg_done)
        self.notices = Notices(hs)
        self.custody = Custody(hs, self.notices, KeyWindow(Table.SEEN, state.seen_keys))
        self._unchecked: list[MSGBLOK] = []
        self._restore(state)
        self.control = Control(hs, self.sessions, self.notices, self.custody)
        self.dispatcher = ProcessDispatcher(hs, self.sessions, self.control.over_quota)
        self.delivery = Delivery(hs, self.sessions, self.notices)
        self.lists.arrived.clear()  # restored, not arrived: observers got their copies before
        self.receiver = receiver = MessageReceiver(hs, self.dups, self.custody.seen, self.notices, self.reassembly,
                                                   self.control)
        self.custody.hand = receiver.ready
        for blk in self._unchecked:
            receiver.check_again(blk)
        self.lines = Lines(hs, new_machine or (lambda lc: make_machine(self.host, lc, cfg.max_message, self.epoch,
                                                                       random_bytes)),
                           receiver, PeerEpochs(state.peer_epochs), self.control.holds, self.custody,
                           Forgets.restored(state.forgets))
        self.queue = Queue(hs, self.lines, self.notices)
        self._now = 0.0
        self._fx = Effects()
        self._sends = 0
        self._taken: list[MSGBLOK] = []  # confirmed since the last pass, with a receipt asked
        self._pings: list[tuple[int, object, Ping]] = []  # asked since the last pass

    def _restore(self, state: Restored) -> None:
        """Initialization: the lists exactly as they were at the last commit."""
        for row in state.send_list:
            blk = MSGBLOK.from_row(row)
            if blk.flags & CUSTODY:  # a copy kept until its destination has taken it
                self.custody.restore(blk)
            else:
                self.lists.send.add(blk)
            self._hold(blk)
        for row in state.recv_list:
            blk = MSGBLOK.from_row(row)
            if blk.flags & UNCHECKED:  # its text is checked again before anyone sees it (mccs.core.receiver)
                self._unchecked.append(blk)
            elif not self.pairs.into.is_held(blk) and not blk.flags & VOID:  # held ones stay out of sight
                self.lists.arrive(blk)
            self._hold(blk)
        for box in self.lists.recv.boxes.values():
            box.restore_order()
        for p in state.wait_list:
            self.lists.wait.add_send(PRQBLOK.restored(p), host_of(p.to_id) == self.host)

    def _hold(self, blk: MSGBLOK) -> None:
        if blk.origin == self.host:
            self.ids.hold(blk.msg_id)

    # -- inputs -------------------------------------------------------------------------------
    def keys_changed(self, keys: Keyring) -> None:
        """The operator changed the key file or the trust file (mccs keys): they count from now on."""
        self.keys.update(keys)

    def connected(self, conn: int, creds: Creds | None) -> None:
        self.sessions.open(conn, creds)

    def disconnected(self, conn: int) -> None:
        """A process went away: its waiting RECVs die, what it held unconfirmed is ready again in
        its place on RECV_LIST for the next RECV of its name (another handler's, or its own after
        a reconnect). Its SENDs stay: the library retries them."""
        session = self.sessions.close(conn)
        if session is None:
            return
        for key in {session.recv_key, session.name}:
            self.lists.wait.drop_recvs(conn, key)
        self.control.forget(conn)
        for blk in session.handed.values():
            self.lists.recv.give_back(blk)
        if session.handed:
            assert session.name is not None  # it was handed messages: RECV is NAMED (request)
            self.lists.recv.boxes[session.name].restore_order()
            self.lists.wait.dirty.add(session.name)
        for queue in (self.lists.wait.remote_sends, self.lists.wait.local_sends, self.lists.wait.batches):
            for prq in queue:
                if prq.conn == conn:
                    prq.conn = None

    def request(self, conn: int, rid: object, req: Request, now: float, prior=None) -> float:
        """A request from a connection; `prior` is the stored outcome of a SEND's request id, if
        the checkpoint has one (a retry after a restart): (MSG_ID, TO_ID), or for a send_many the
        list of its entries'. Replies go out with the next pass; within how many seconds it should
        run for this request: 0, or CONFIRM_WAIT for a RECV that waits (see _may_wait)."""
        session = self.sessions.by_conn.get(conn)
        if session is None:  # a connection of a core rebuilt after a failed pass: it is being closed
            return 0.0
        self.counters["requests"] += 1
        try:
            if isinstance(req, NAMED) and session.name is None:
                raise RequestError(Code.NO_NAME, "say hello with a process name first")
            if isinstance(req, Hello):
                self._hello(session, rid, req)
            elif isinstance(req, Observe):
                self._observe(session, rid, req)
            elif isinstance(req, Send):
                self._send(session, rid, req, prior)
            elif isinstance(req, SendMany):
                self._send_many(session, rid, req, prior)
            elif isinstance(req, Recv):
                self._recv(session, rid, req, now)
            elif isinstance(req, Confirm):
                self._confirm(session, rid, req)
            elif isinstance(req, Cancel):
                self._cancel(session, rid, req, prior)
            elif isinstance(req, Ping) and req.host:  # through the network, in the pass (it has the wall clock)
                if not self.known_host(req.host) and req.host != self.host:
                    raise RequestError(Code.UNKNOWN_HOST, f"host {req.host!r} is unknown here: nothing to ping")
                self._pings.append((conn, rid, req))
            elif isinstance(req, Ping):
                self._fx.reply(conn, rid, Alive(self.host))
            elif isinstance(req, QueueRequest):  # carried out in the pass, which has the wall clock
                self.queue.ops.append((conn, rid, req))
            elif isinstance(req, LineRequest):
                self._fx.reply(conn, rid, self.lines.operator(req, now))
        except RequestError as e:
            self.refuse(conn, rid, e)
        if isinstance(req, Recv) and self._may_wait(session, req):
            return CONFIRM_WAIT if req.timeout is None else min(CONFIRM_WAIT, req.timeout)  # its timeout runs a pass
        return 0.0

    def _may_wait(self, session: Session, req: Recv) -> bool:
        """A RECV that waits, with nothing here for it, needs no pass: what it changed (the deletes
        of the confirms it carries) may be committed by the next pass that has something to do,
        before its reply as ever. Not if a pass must act on what the confirms freed: room on
        RECV_LIST for a line told busy or a waiting SEND, a quota's hold to lift, a receipt."""
        lists = self.lists
        box = lists.recv.boxes.get(session.name) if session.name is not None else None  # (a RECV refused: no hello)
        return (req.wait and not self._fx.replies and not self._taken and not session.copies
                and (box is None or not (box.ready or box.replies))
                and len(lists.recv) + len(req.confirm) < self.cfg.buffers and not self.disk_full
                and not (lists.wait.remote_sends or lists.wait.local_sends or lists.wait.batches)
                and not self.control.holding)

    def refuse(self, conn: int, rid: object, e: RequestError) -> None:
        self.counters["bad_requests" if e.code is Code.BAD_REQUEST else "refused"] += 1
        self._fx.reply(conn, rid, Refused.of(e))

    def line_data(self, peer: str, data: bytes, now: float) -> float | None:
        """Bytes from a line; within how many seconds a pass should handle what they made, or None
        (see Lines.data)."""
        return self.lines.data(peer, data, now)

    def line_answers(self, peer: str) -> bytes:
        """What the line's machine answered to those bytes, for the shell to write now (see Lines.answers)."""
        return self.lines.answers(peer)

    def line_wanted(self, peer: str, now: float) -> int:
        """Bytes the line needs before anything can happen on it (see Lines.wanted)."""
        return self.lines.wanted(peer, now)

    def pieces_read(self, pieces: list[tuple[Stored, int, bytes]]) -> None:
        """Pieces of large texts the driver read from the checkpoint, as the last pass asked (Effects.reads)."""
        for where, offset, data in pieces:
            self.blobs.arrived(where, offset, data)

    def program_exited(self, pid: str, code: int, now: float) -> None:
        """A program the shell started for process `pid` (Effects.starts) has ended."""
        self.delivery.exited(pid, code, now)

    def port_state(self, peer: str, is_open: bool, why: str, now: float, modem_lines: bool = False) -> None:
        """A line's port opened (`modem_lines`: it has DTR and DCD) or was lost."""
        self.lines.port_state(peer, is_open, why, now, self._fx, modem_lines)

    def carrier(self, peer: str, on: bool, now: float) -> None:
        """A line's DCD changed (a port with modem lines)."""
        self.lines.carrier(peer, on, now)

    def set_disk_full(self, flag: bool) -> None:
        """No room on the disk: refuse new SENDs and tell the lines busy; deliveries go on."""
        if flag != self.disk_full:
            self.disk_full = flag
            log.error("%s: %s", self.host, "disk full: new messages are refused until there is room" if flag
                      else "room on the disk again: new messages are accepted")

    # -- process requests -----------------------------------------------------------------------
    def _hello(self, session: Session, rid: object, req: Hello) -> None:
        pid = self.host + req.name
        self._permit(session, req.name)
        if session.name and (session.name, session.handler) != (pid, not req.observe):  # its RECVs are that name's
            raise RequestError(Code.BAD_REQUEST, f"this connection is process {session.name.rstrip()!r}; "
                                              "connect again for another name")
        self.sessions.attach(session, pid, handler=not req.observe)
        self._fx.reply(session.conn, rid, Welcome(pid, self.host, self.cfg.max_message))

    def _observe(self, session: Session, rid: object, req: Observe) -> None:
        """Copies of the messages that arrive for a name from now on, as the name's owner may."""
        self._permit(session, req.name)
        self.sessions.observe(session, self.host + req.name)
        self._fx.reply(session.conn, rid, Observing(self.host + req.name))

    def _permit(self, session: Session, name: str) -> None:
        """May this connection hold or observe process `name`: not the daemon's own, and as its
        [[process]] says."""
        if name.rstrip() == NOTICE_NAME:
            raise RequestError(Code.NOT_PERMITTED, f"process name {NOTICE_NAME!r} is the daemon's own: its notices "
                                                "come from it")
        why = self.sessions.refusal(session, name)
        if why:
            raise RequestError(Code.NOT_PERMITTED, why)

    def _send(self, session: Session, rid: object, req: Send, prior: tuple[int, str] | None) -> None:
        self._check_send(req)
        if prior is not None:  # a retry of a SEND already stored: its MSG_ID, not a second copy
            self._fx.reply(session.conn, rid, Accepted(*prior))
            return
        if not self._new_send(session, rid, req.req):
            return
        prq = self._prqblok(session, rid, req, req.req or f"{session.conn}.{rid}.{self.seqs.next}")
        self.lists.wait.add_send(prq, host_of(req.to_id) == self.host)

    def _send_many(self, session: Session, rid: object, req: SendMany, prior: list[tuple[int, str]] | None) -> None:
        """A batch: every entry checked first (one bad entry refuses the whole batch), then one
        PRQBLOK on WAIT_LIST that the Process-Dispatcher stores as a whole when all of it fits."""
        for i, send in enumerate(req.sends):
            try:
                self._check_send(send)
            except RequestError as e:
                raise RequestError(e.code, f"msgs[{i}]: {e}") from None
        if len(req.sends) > self.cfg.buffers:
            raise RequestError(Code.TOO_LARGE, f"a batch of {len(req.sends)} messages is over the {self.cfg.buffers} "
                                            "buffers of this host")
        if prior:  # a retry of a batch already stored (all of it: it was one commit)
            self._fx.reply(session.conn, rid, AcceptedMany(tuple(p[0] for p in prior)))
            return
        if not self._new_send(session, rid, req.req):
            return
        key = req.req or f"{session.conn}.{rid}.{self.seqs.next}"
        assert session.name is not None  # NAMED: refused before hello (request)
        batch = PRQBLOK(Op.SEND, session.conn, rid, session.name, "", req=key,
                        batch=[self._prqblok(session, None, send, f"{key}/{i}") for i, send in enumerate(req.sends)])
        self.lists.wait.add_batch(batch)

    def _check_send(self, req: Send) -> None:
        if req.to_id[2:].rstrip() == NOTICE_NAME:  # it would wait on RECV_LIST for ever
            raise RequestError(Code.NOT_PERMITTED, f"TO_ID {req.to_id.rstrip()!r}: process name {NOTICE_NAME!r} is "
                                                "the daemon's own, which receives no messages")
        if len(req.data) > self.cfg.max_message:
            raise RequestError(Code.TOO_LARGE, f"message of {len(req.data)} bytes is over the maximum of "
                                            f"{self.cfg.max_message}")
        if not self.known_host(host_of(req.to_id)):
            raise RequestError(Code.UNKNOWN_HOST, f"host {host_of(req.to_id)!r} is unknown here (not a neighbour, "
                                               f"a [[route]], or a host learned from the network): TO_ID "
                                               f"{req.to_id.rstrip()!r} refused")
        dest = host_of(req.to_id)
        if self.cfg.e2e != "off" and dest != self.host and not self.keys.trusts(dest):
            raise RequestError(Code.NO_KEY, f"e2e = {self.cfg.e2e!r} here, and no key of {dest!r} is trusted: "
                                            f"nothing was sent (mccs keys trust {dest} KEY, from `mccs keys show` "
                                            f"on {dest})")

    def _new_send(self, session: Session, rid: object, req: str) -> bool:
        """Is this a new SEND (not a retry of one still waiting, answered with it), and is there room?"""
        waiting = self.lists.wait.find_send(req) if req else None
        if waiting is not None:  # a retry of one not yet stored
            waiting.retries.append((session.conn, rid))
            return False
        if self.disk_full:
            raise RequestError(Code.DISK_FULL, f"host {self.host} has no room on its disk for new messages; "
                                            "try again later")
        return True

    def _prqblok(self, session: Session, rid: object, req: Send, key: str) -> PRQBLOK:
        assert session.name is not None  # send and send_many are NAMED: refused before hello (request)
        return PRQBLOK(Op.SEND, session.conn if rid is not None else None, rid, session.name, req.to_id, req.user_id,
                       req.data, req=key, ttl=req.ttl or 0.0, priority=req.priority,
                       flags=(RECEIPT if req.receipt else 0) | (REPLY if req.reply else 0) | (0 if req.ok else FAILED))

    def _recv(self, session: Session, rid: object, req: Recv, now: float) -> None:
        for handed in req.confirm:  # the confirms of messages handed before, carried: committed before this reply
            if handed in session.handed:  # (one not handed is confirmed already: the RECV was asked again)
                self._take(session, handed)
        if req.from_id and not self.known_host(host_of(req.from_id)):  # no link to that host: blank at once
            self._fx.reply(session.conn, rid, NOTHING)
            return
        deadline = now + req.timeout if req.timeout is not None else None
        assert session.name is not None  # NAMED: refused before hello (request)
        key = session.name if req.reply_to else session.recv_key  # a reply is in its name's mailbox
        self.lists.wait.add_recv(PRQBLOK(Op.RECV, session.conn, rid, req.from_id, key, req.user_id,
                                         wait=req.wait, deadline=deadline, reply_to=req.reply_to, most=req.max))

    def _confirm(self, session: Session, rid: object, req: Confirm) -> None:
        """A process has its message: off RECV_LIST for good (the reply waits for the commit)."""
        self._take(session, req.rid)
        self._fx.reply(session.conn, rid, Confirmed())

    def _take(self, session: Session, rid: int) -> None:
        blk = session.handed.pop(rid, None)
        if blk is None:
            raise RequestError(Code.BAD_REQUEST, f"nothing handed to this connection under rid {rid!r}")
        self.lists.recv.remove(blk)
        self._hold_released(blk)
        fx = self._fx
        fx.change(ch.delete_block(Table.RECV_LIST, blk.seq))
        fx.trace("msg", "delivered", **fields(blk))
        self.counters["delivered"] += 1
        self.delivery.taken(blk.to_id)
        if blk.flags & RECEIPT:
            self._taken.append(blk)  # its delivered notice is made in the pass (it needs the wall clock)

    def _hold_released(self, blk: MSGBLOK) -> None:
        if blk.origin == self.host:
            self.ids.release(blk.msg_id)

    def _cancel(self, session: Session, rid: object, req: Cancel, prior: tuple[int, str] | None) -> None:
        """Take back a SEND still waiting for a buffer; says the MSG_ID if it was stored meanwhile."""
        prq = self.lists.wait.find_send(req.req)
        if prq is not None and prq.from_id == session.name:
            if prq.durable:
                self._fx.change(ch.delete_waiting(prq.req))
                self.lists.wait.durable_sends -= 1
            answer(self._fx, prq, Failed(Code.CANCELLED, "the SEND was cancelled"))
            self._fx.reply(session.conn, rid, Cancelled(True))
            return
        self._fx.reply(session.conn, rid, Cancelled(False, prior or None))

    def known_host(self, host: str) -> bool:
        return self.routes.is_known(host)

    # -- the pass -------------------------------------------------------------------------------
    def run_pass(self, now: float, wall: float) -> Effects:
        """Message-Receiver, Process-Dispatcher, then acknowledgements and the Message-Sender.
        Everything the pass changed is in the returned Effects, to be committed before the rest."""
        fx, self._fx = self._fx, Effects()
        self._now = now
        self.blobs.committed()
        self.lines.receive(fx, now, wall)
        self.receiver.check_texts(fx, wall)
        ready, changes, gap = self.pairs.into.due(wall)  # waits for refused messages that are over
        fx.change(*changes)
        self.receiver.ready(fx, ready, wall)
        fx.wake_at(None if gap is None else now + max(0.0, gap - wall))
        for blk in self._taken:
            self.notices.delivered(fx, blk, wall)
        self._taken.clear()
        self.queue.run(fx, wall)
        for conn, rid, ping in self._pings:
            self.control.ping(fx, conn, rid, ping.host, ping.name, ping.timeout, now, wall)
        self._pings.clear()
        self.dispatcher.sends(fx, wall)
        self.delivery.arrivals(fx, wall)
        self.dispatcher.recvs(fx, now, wall)
        self.control.renew(fx, wall)
        self.notices.expire(fx, wall)
        custody = self.custody.run(fx, wall)
        fx.wake_at(None if custody is None else now + max(0.0, custody - wall))
        for blk in self.lines.overdue(now):
            self.lines.give_up(blk, fx)
            self.notices.drop(fx, blk, "too large", wall)
        self.delivery.late_replies(fx, wall)
        for p in self.reassembly.stale(wall - self.cfg.ttl):  # its sender gave up on it long ago
            log.warning("%s: dropped the partly received %s/%d (%d of %d bytes): nothing came for it for %.0f s",
                        self.host, p.origin, p.msg_id, p.got, p.total, self.cfg.ttl)
            self.counters["partials_dropped"] += 1
            fx.change(*self.reassembly.drop(p))
        self._trim_send_done(fx)
        fx.change(*self.ids.flush())
        if self.seqs.dirty:
            self.seqs.dirty = False
            fx.change(ch.set_meta("next_seq", self.seqs.next))
        self.lines.send(fx, self.disk_full or len(self.lists.recv) >= self.cfg.buffers, wall)
        fx.wake_at(self.lists.wait.next_deadline())
        for expiry in (self.lists.send.next_expiry(), self.lists.recv.next_expiry()):
            fx.wake_at(None if expiry is None else now + max(0.0, expiry - wall))
        self.delivery.start_programs(fx, now)
        fx.wake_at(self.lines.deadline())
        fx.wake_at(self.control.expire(fx, now))
        lease = self.control.next_lease_end(wall)
        fx.wake_at(None if lease is None else now + lease)
        if self.blobs.pending:  # a large message stored in this pass waits for the next one to go on
            fx.wake_at(now)
        if self.blobs.wanted:  # pieces to read for the lines: the driver reads them, the next pass sends them
            fx.reads, self.blobs.wanted = list(self.blobs.wanted.values()), {}
            fx.wake_at(now)
        fx.write_at = self.lines.next_write()
        return fx

    def write_paced(self, now: float) -> Effects:
        """The driver's other entry: at `write_at`, the paced writes of the lines (the pieces of a
        long frame built already, AsyncLine.next_write), without a pass: no input, no change, no
        trace. Its deadline, if any, is when a pass must come for a line whose frame is all handed."""
        fx = Effects()
        self.lines.write_paced(fx, now)
        fx.wake_at(self.lines.deadline())
        fx.write_at = self.lines.next_write()
        return fx

    def _trim_send_done(self, fx: Effects) -> None:
        stored = self.counters["accepted"]
        if stored // SEND_DONE_TRIM != self._sends // SEND_DONE_TRIM:
            fx.change(ch.trim_send_done(SEND_DONE_KEEP))
        self._sends = stored

    def stop(self, now: float) -> Effects:
        """Sign off every line (the shell writes the bytes and closes the ports)."""
        fx, self._fx = self._fx, Effects()
        self.lines.stop(now, fx)
        return fx

    def status(self) -> dict:
        lists = self.lists
        return {"host": self.host, "epoch": self.epoch, "disk_full": self.disk_full,
                "lists": {"wait": len(lists.wait), "send": len(lists.send), "recv": len(lists.recv)},
                "msg_ids_in_use": len(self.ids.in_use), "lines": self.lines.status(),
                "routing": self.cfg.routing, "routes": self.routes.status(self._now),
                "waiting_for": self.lists.send.waiting(), "oldest_waiting": self.lists.send.oldest(),
                "held_for_order": self.pairs.into.status(), "custody": self.custody.status(),
                "quota": self.control.status(),
                "receiving": self.reassembly.status(), "programs": self.delivery.status(),
                "attached": {pid.rstrip(): len(held) for pid, held in self.sessions.handlers.items()},
                "observed": {pid.rstrip(): len(held) for pid, held in self.sessions.observers.items()},
                "counters": {**self.counters, "connections": len(self.sessions)}}
