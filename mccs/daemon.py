"""The daemon of one host: Initialization and the loop of Figure 2 of the paper.

The loop never busy-waits: a process request, a line event or a timer schedules one pass.
A pass runs, inside one checkpoint transaction (group commit), the confirms of RECVs, the
Message-Receiver's line events and the Process-Dispatcher; then it commits, and only then lets
anything that depends on the pass leave the daemon: trace events of messages, replies to
processes, acknowledgements on lines. The Message-Sender runs after the commit, so a MSGBLOK
reaches a line only once it is durable.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import signal
import time
import uuid

from checkpoint.store import Checkpoint
from linedrivers.ids import IdError, process_id, process_name

from . import server
from .config import HostConfig
from .dispatcher import ProcessDispatcher
from .ipc import FrameError, PROTOCOL_VERSION, b64, unb64
from .lines import Lines
from .lists import MSGBLOK, PRQBLOK, Lists
from .trace import TraceWriter

log = logging.getLogger("mccs.daemon")


class Daemon:
    def __init__(self, cfg: HostConfig):
        self.cfg = cfg
        self.host = cfg.id
        self.lists = Lists()
        self.counters: collections.Counter = collections.Counter()
        self.names: dict[str, server.Connection] = {}
        self.lines = Lines(self)
        self.dispatcher = ProcessDispatcher(self)
        self.cp: Checkpoint | None = None
        self.trace: TraceWriter | None = None
        self._next_msg_id = 1
        self._msg_id_dirty = False
        self._confirms: list[tuple[server.Connection, object, MSGBLOK]] = []
        self._new_blocks: list[MSGBLOK] = []
        self._traces: list[tuple[str, MSGBLOK, dict]] = []
        self._replies: list[tuple[server.Connection, dict]] = []
        self._pass_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._stopping: asyncio.Event | None = None
        self.started = time.time()
        self.failed = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- Initialization -------------------------------------------------------------------
    def initialize(self) -> None:
        """Open the checkpoint and restore the lists exactly as they were at the last commit."""
        self.cp = Checkpoint(self.cfg.checkpoint, self.host, self.cfg.synchronous)
        state = self.cp.restore()
        for row in state.send_list:
            self.lists.send.add(MSGBLOK.from_row(row))
        for row in state.recv_list:
            self.lists.recv.add(MSGBLOK.from_row(row))
        for p in state.wait_list:
            self.lists.wait.append(PRQBLOK("send", None, None, p.from_id, p.to_id, p.user_id, p.data,
                                           req=p.req, durable=True))
        self._next_msg_id = state.next_msg_id
        self.trace = TraceWriter(self.cfg.trace_dir, self.host, self.cfg.trace_max_bytes)
        log.info("%s: restored SEND_LIST %d, RECV_LIST %d, WAIT_LIST %d, next MSG_ID %d", self.host,
                 len(self.lists.send), len(self.lists.recv), len(self.lists.wait), self._next_msg_id)

    def run(self) -> int:
        """Initialization, then the loop until SIGTERM or SIGINT."""
        self.initialize()
        try:
            asyncio.run(self._main())
        finally:
            self.trace.close()
            self.cp.close()
        return 70 if self.failed else 0

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._stopping.set)
        limit = 4096 + 2 * self.cfg.max_message
        srv = await server.listen(self, self.cfg.socket, self.cfg.socket_group, limit)
        self.lines.start()
        self.wake()
        log.info("%s: daemon ready on %s", self.host, self.cfg.socket)
        await self._stopping.wait()
        log.info("%s: stopping", self.host)
        srv.close()
        self.lines.stop()
        if not self.failed:
            self.run_pass()

    # -- waking the loop ------------------------------------------------------------------
    def wake(self) -> None:
        """Something changed: run one pass soon (once, however many things changed)."""
        if not self._pass_pending:
            self._pass_pending = True
            self.loop.call_soon(self.run_pass)

    def wake_at(self, when: float) -> None:
        """Run a pass at monotonic time `when` (a RECV timeout or a line timer)."""
        if self._timer_at is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = self._timer_at = None
        self.wake()

    # -- one pass -------------------------------------------------------------------------
    def run_pass(self) -> None:
        """One pass; a failure inside it stops the daemon: the checkpoint rolled back, and memory
        is only trusted again after Initialization restores it from there."""
        self._pass_pending = False
        try:
            self._pass()
        except Exception:
            log.critical("%s: internal error in a loop pass; stopping (a restart restores the checkpoint)",
                         self.host, exc_info=True)
            self.failed = True
            self._stopping.set()

    def _pass(self) -> None:
        now = time.monotonic()
        with self.cp.transaction():
            self._apply_confirms()
            self.lines.receive(now)
            self.dispatcher.run(now)
            if self._msg_id_dirty:
                self.cp.set_next_msg_id(self._next_msg_id)
                self._msg_id_dirty = False
        for blk in self._new_blocks:
            blk.durable = True
        self._new_blocks.clear()
        for kind, blk, extra in self._traces:
            self.trace.msg(kind, origin=blk.origin, msg_id=blk.msg_id, from_id=blk.from_id, to_id=blk.to_id,
                           user_id=blk.user_id, **extra)
        self._traces.clear()
        self.trace.flush()
        for conn, obj in self._replies:
            conn.reply(obj)
        self._replies.clear()
        self.lines.after_commit(now)
        self.trace.flush()
        deadlines = [p.deadline for p in self.lists.wait if p.op == "recv" and p.deadline is not None]
        deadlines += self.lines.deadlines()
        if deadlines:
            self.wake_at(min(deadlines))

    def _apply_confirms(self) -> None:
        """A process has a message: take it off RECV_LIST for good."""
        for conn, rid, blk in self._confirms:
            self.lists.recv.remove(blk)
            self.cp.delete("recv_list", blk.seq)
            self.after_commit_trace("delivered", blk)
            self.counters["delivered"] += 1
            self._replies.append((conn, {"id": rid, "ok": True}))
        self._confirms.clear()

    # -- used by the dispatcher and the lines ----------------------------------------------
    def allocate_msg_id(self) -> int:
        """16-bit, unique per host, never 0, skipping ids still on SEND_LIST after a wrap."""
        for _ in range(65536):
            msg_id = self._next_msg_id
            self._next_msg_id = msg_id % 0xFFFF + 1
            if msg_id not in self.lists.send.by_msg_id and (self.host, msg_id) not in self.lists.recv.keys:
                break
        self._msg_id_dirty = True
        return msg_id

    def committed(self, blk: MSGBLOK) -> None:
        """`blk` was added in this pass: durable once the pass commits."""
        self._new_blocks.append(blk)

    def after_commit_trace(self, kind: str, blk: MSGBLOK, **extra) -> None:
        self._traces.append((kind, blk, extra))

    def answer(self, prq: PRQBLOK, obj: dict) -> None:
        for conn, rid in [(prq.conn, prq.rid), *prq.retries]:
            if conn is not None:
                self._replies.append((conn, {"id": rid, **obj}))

    def message_dict(self, blk: MSGBLOK) -> dict:
        return {"rid": blk.seq, "from_id": blk.from_id, "to_id": blk.to_id, "msg_id": blk.msg_id,
                "user_id": blk.user_id, "data": b64(blk.data)}

    def known_host(self, host: str) -> bool:
        return host == self.host or self.cfg.line_for(host) is not None

    # -- process requests -----------------------------------------------------------------
    def request(self, conn: server.Connection, req: dict) -> None:
        self.counters["requests"] += 1
        op, rid = req.get("op"), req.get("id")
        handler = {"hello": self._hello, "send": self._send, "recv": self._recv,
                   "confirm": self._confirm, "status": self._status}.get(op)
        try:
            if handler is None:
                raise FrameError(f"unknown op {op!r} (hello, send, recv, confirm, status)")
            if op in ("send", "recv", "confirm") and conn.name is None:
                raise FrameError("say hello with a process name first")
            handler(conn, rid, req)
        except (FrameError, IdError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            self.counters["bad_requests"] += 1
            code = getattr(e, "code", "bad_request")
            conn.reply({"id": rid, "ok": False, "error": str(e), "code": code})

    def _hello(self, conn, rid, req) -> None:
        name = process_name(req.get("name"))
        pid = self.host + name
        holder = self.names.get(pid)
        if holder is not None and holder is not conn and not holder.closed:
            conn.reply({"id": rid, "ok": False, "code": "name_in_use",
                        "error": f"process {pid.rstrip()!r} is held by another live connection"})
            return
        if conn.name and conn.name != pid:  # its waiting RECVs and handed messages belong to that name
            raise FrameError(f"this connection is process {conn.name.rstrip()!r}; connect again for another name")
        conn.name = pid
        self.names[pid] = conn
        conn.reply({"id": rid, "ok": True, "process": pid, "host": self.host, "max_message": self.cfg.max_message,
                    "v": PROTOCOL_VERSION})

    def _send(self, conn, rid, req) -> None:
        to_id = process_id(req.get("to", ""))
        data = unb64(req.get("data", ""))
        user_id = req.get("user_id", 0)
        request_id = req.get("req") or uuid.uuid4().hex
        if not isinstance(request_id, str) or len(request_id) > 64:
            raise FrameError("req must be a string of at most 64 characters (a random request id)")
        if not isinstance(user_id, int) or not 0 <= user_id <= 0xFFFF:
            raise FrameError(f"USER_ID {user_id!r} is not a 16-bit number")
        if len(data) > self.cfg.max_message:
            raise _Refused("too_large", f"message of {len(data)} bytes is over the maximum of {self.cfg.max_message}")
        if not self.known_host(to_id[:2]):
            raise _Refused("unknown_host", f"no line to host {to_id[:2]!r}: TO_ID {to_id.rstrip()!r} refused")
        done = self.cp.find_send_done(request_id)
        if done is not None:  # a retry of a SEND already stored: its MSG_ID, not a second copy
            conn.reply({"id": rid, "ok": True, "msg_id": done[0], "to": done[1]})
            return
        for prq in self.lists.wait:
            if prq.op == "send" and prq.req == request_id:  # a retry of one not yet stored
                prq.retries.append((conn, rid))
                return
        self.lists.wait.append(PRQBLOK("send", conn, rid, conn.name, to_id, user_id, data, req=request_id))
        self.wake()

    def _recv(self, conn, rid, req) -> None:
        from_id = req.get("from") or ""
        if from_id.strip():
            from_id = process_id(from_id)
            if not self.known_host(from_id[:2]):  # no link to that host: blank at once
                conn.reply({"id": rid, "ok": True, "msg": None})
                return
        timeout = req.get("timeout")
        if timeout is not None and not math.isfinite(float(timeout)):  # NaN would spin the loop's timer
            raise FrameError(f"timeout {timeout!r} is not a finite number of seconds")
        deadline = time.monotonic() + float(timeout) if timeout is not None else None
        user_id = int(req.get("user_id") or 0)
        if not 0 <= user_id <= 0xFFFF:
            raise FrameError(f"USER_ID {user_id!r} is not a 16-bit number")
        self.lists.wait.append(PRQBLOK("recv", conn, rid, from_id, conn.name, user_id,
                                       wait=bool(req.get("wait", True)), deadline=deadline))
        self.wake()

    def _confirm(self, conn, rid, req) -> None:
        blk = conn.handed.pop(req.get("rid"), None)
        if blk is None:
            raise FrameError(f"nothing handed to this connection under rid {req.get('rid')!r}")
        self._confirms.append((conn, rid, blk))
        self.wake()

    def _status(self, conn, rid, req) -> None:
        conn.reply({"id": rid, "ok": True, "status": self.status()})

    def status(self) -> dict:
        return {"host": self.host, "pid": os.getpid(), "uptime": round(time.time() - self.started, 3),
                "lists": {"wait": len(self.lists.wait), "send": len(self.lists.send), "recv": len(self.lists.recv)},
                "lines": self.lines.status(),
                "counters": {**self.counters, "commits": self.cp.commits, "trace_errors": self.trace.errors,
                             "connections": len(self.names)}}

    def disconnected(self, conn: server.Connection) -> None:
        """A process went away: its name is free, what it held unconfirmed goes back on RECV_LIST."""
        if conn.name and self.names.get(conn.name) is conn:
            del self.names[conn.name]
        for blk in conn.handed.values():
            blk.active, blk.holder = False, None
        conn.handed.clear()
        keep = []
        for prq in self.lists.wait:
            if prq.conn is conn:
                if prq.op == "recv":
                    continue
                prq.conn = None  # a SEND stays: the library will retry it with the same request id
            keep.append(prq)
        self.lists.wait = keep
        self.wake()


class _Refused(ValueError):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
