"""The daemon of one host: the asyncio shell around the sans-I/O core (`kernel.Kernel`).

The shell owns what the core must not: the process socket, the serial ports (their reader
threads hand bytes to the loop), the checkpoint file, the trace files and the clock. A process
request, bytes from a line or a timer schedules one pass; the pass's Effects are performed by
mccs.daemon.driver in their order: the checkpoint changes in one transaction (committed), then the trace
events, the replies and the bytes for the lines. Nothing that depends on a change leaves before
its commit.

A pass whose commit fails (the disk is full, an I/O error) is rolled back, and the core is
rebuilt from the checkpoint, as a restart would: connections are closed (the client library
reconnects and asks again), lines sign on afresh. While the disk is full, new messages are
refused with `disk_full` and the lines say busy; deliveries, RECVs and confirms go on, and the
daemon takes new messages again by itself once there is room.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import signal
import sqlite3
import time

from checkpoint.changes import Stored
from checkpoint.store import Checkpoint, CheckpointError, CheckpointFull
from linedrivers.port import SerialPort

from mccs.core import requests
from mccs.daemon import keys, server, service
from mccs.daemon.keys import KeyFileError
from mccs.config import HostConfig, LineConfig
from mccs.daemon.driver import perform, prior, reply_text, write_lines
from mccs.core.effects import Reply, StartProgram, TraceEvent
from mccs.core.kernel import Kernel
from mccs.client.ipc import b64
from mccs.core.replies import CodecSwitched, StatusReport
from mccs.core.requests import Code, Codec, Hello, RequestError, Status
from mccs.daemon.trace import TraceWriter

log = logging.getLogger("mccs.daemon.shell")

GATHER_WAIT = 0.0005  # seconds a pass may wait for the processes its last commit answered (group commit)
KEYS_CHECK = 1.0  # seconds between looks at the key and trust files' times (mccs keys while the daemon runs)
SPACE_CHECK = 1.0  # seconds between checks of the free space, while changes are made
FULL_PROBE = 2.0  # seconds between attempts to write again while the disk is full
RECOVERY_LIMIT = 5  # failed passes within RECOVERY_WINDOW seconds (other than a full disk) stop the daemon
RECOVERY_WINDOW = 60.0
EXIT_INTERNAL = 70


def frame_limit(max_message: int) -> int:
    """The largest request: a message in base64, or a batch (send_many) of BATCH_BYTES in base64
    with a little JSON for each of its entries."""
    return 4096 + 2 * max(max_message, requests.BATCH_BYTES) + 256 * requests.BATCH_MAX


class Daemon:
    def __init__(self, cfg: HostConfig, new_checkpoint: bool = False):
        self.cfg = cfg
        self.host = cfg.id
        self.new_checkpoint = new_checkpoint
        # Set by initialize() (cp, kernel, trace) and _main() (loop, _stopping), before anything uses them.
        self.cp: Checkpoint
        self.kernel: Kernel
        self.trace: TraceWriter
        self.loop: asyncio.AbstractEventLoop
        self._stopping: asyncio.Event
        self.conns: dict[int, server.Connection] = {}
        self.ports: dict[str, SerialPort] = {}
        self.started = time.time()
        self.failed = False
        self._pass_pending = False
        self._full_said, self._full_failures = float("-inf"), 0  # passes failed on a full disk, not yet logged
        self._gathering: asyncio.TimerHandle | None = None  # a pass that waits for answered processes
        self._answered: set[int] = set()  # connections the last commit answered, not yet back
        self.passes = 0  # passes run: with commits, what a message costs the daemon (mccs status)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._writes: asyncio.TimerHandle | None = None  # the core's paced writes (Effects.write_at)
        self._probe: asyncio.TimerHandle | None = None
        self._space_checked = 0.0
        self._recoveries: list[float] = []
        self.programs: set[asyncio.subprocess.Process] = set()  # started for a process name, still running

    # -- Initialization -----------------------------------------------------------------------
    def initialize(self) -> None:
        """Open the checkpoint and restore the lists exactly as they were at the last commit."""
        self._keys_stamp, self._keys_checked = keys.stamp(self.cfg), time.monotonic()
        self.keys = keys.keyring(self.cfg, time.time())  # (a key file that cannot be used stops the start here)
        self.cp = Checkpoint(self.cfg.checkpoint, self.host, self.cfg.synchronous, new=self.new_checkpoint)
        try:
            self.kernel = self._core()
        except (sqlite3.Error, LookupError, TypeError, ValueError) as e:  # tables or rows not as written
            self.cp.close()
            raise CheckpointError(f"checkpoint {self.cfg.checkpoint} cannot be restored ({e!r}): it is damaged. "
                                  "Put a backup in its place (mccs checkpoint backup makes them), or start the "
                                  "host afresh with --new-checkpoint; the file is left as it is") from None
        self.trace = TraceWriter(self.cfg.trace_dir, self.host, self.cfg.trace_max_bytes)
        lists = self.kernel.status()["lists"]
        log.info("%s: restored SEND_LIST %d, RECV_LIST %d, WAIT_LIST %d, next MSG_ID %d", self.host,
                 lists["send"], lists["recv"], lists["wait"], self.kernel.ids.next_id)

    def _core(self) -> Kernel:
        return Kernel(self.cfg, self.cp.restore(), random_bytes=secrets.token_bytes, keys=self.keys)

    def _reload_keys(self, now: float) -> None:
        """`mccs keys` changed the key file or the trust file: the core takes them from the next pass.
        A file that cannot be used now is logged, and the keys read before stay."""
        self._keys_checked = now
        stamp = keys.stamp(self.cfg)
        if stamp == self._keys_stamp:
            return
        self._keys_stamp = stamp
        try:
            self.keys = keys.keyring(self.cfg, time.time())
        except (KeyFileError, OSError) as e:
            log.error("%s: the keys were not read again, those read before stay: %s", self.host, e)
            return
        self.kernel.keys_changed(self.keys)
        log.info("%s: read the key file and the trust file again", self.host)

    def run(self) -> int:
        """Initialization, then the loop until SIGTERM or SIGINT."""
        socket_lock = server.lock_socket(self.cfg.socket, self.cfg.socket_group)
        try:
            self.initialize()
            try:
                asyncio.run(self._main())
            finally:
                self.trace.close()
                self.cp.close()
        finally:
            os.close(socket_lock)
        return EXIT_INTERNAL if self.failed else 0

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._stopping.set)
        srv = await server.listen(self, self.cfg.socket, self.cfg.socket_group, frame_limit(self.cfg.max_message),
                                  self.cfg.max_message)
        for lc in self.cfg.lines:
            self.ports[lc.peer] = self._open_port(lc)
        self.wake()
        log.info("%s: daemon ready on %s", self.host, self.cfg.socket)
        service.notify(f"READY=1\nSTATUS=host {self.host} ready on {self.cfg.socket}\nMAINPID={os.getpid()}")
        await self._stopping.wait()
        log.info("%s: stopping", self.host)
        service.notify("STOPPING=1")
        srv.close()
        if not self.failed:
            self.run_pass()
            write_lines(self.kernel.stop(time.monotonic()).writes, self)  # the sign-offs: nothing to commit
            self._writes_at(None)
            await asyncio.sleep(0.2)  # the sign-offs leave
        for port in self.ports.values():
            port.close()
        for proc in self.programs:  # what the daemon started stops with it
            with contextlib.suppress(ProcessLookupError):  # it has just ended
                proc.terminate()

    def _open_port(self, lc: LineConfig) -> SerialPort:
        call, peer = self.loop.call_soon_threadsafe, lc.peer

        def on_data(data: bytes, now: float) -> None:
            self._line_data(peer, data, now)

        def on_state(up: bool, why: str) -> None:  # from the port's thread
            call(self._port_state, peer, up, why)

        def on_carrier(cd: bool) -> None:  # from the port's thread
            call(self._carrier, peer, cd)

        return SerialPort(lc.port, **lc.port_settings(), backoff_max=lc.backoff_max, loop=self.loop,
                          on_data=on_data, on_state=on_state, on_carrier=on_carrier if lc.is_call else None).start()

    # -- inputs -------------------------------------------------------------------------------
    def _line_data(self, peer: str, data: bytes, now: float) -> None:
        within = self.kernel.line_data(peer, data, now)
        port = self.ports[peer]
        port.write(self.kernel.line_answers(peer))
        port.gather(self.kernel.line_wanted(peer, now))
        if within == 0:
            self.wake()
        elif within is not None:
            self._wake_at(now + within)

    def _port_state(self, peer: str, is_open: bool, why: str) -> None:
        self.kernel.port_state(peer, is_open, why, time.monotonic(), self.ports[peer].modem_lines)
        self.wake()

    def _carrier(self, peer: str, cd: bool) -> None:
        log.info("%s: line to %s: DCD %s", self.host, peer, "on" if cd else "off")
        self.kernel.carrier(peer, cd, time.monotonic())
        self.wake()

    def connected(self, conn: server.Connection) -> None:
        self.conns[conn.id] = conn
        self.kernel.connected(conn.id, conn.creds)

    def disconnected(self, conn: server.Connection) -> None:
        self._answered.discard(conn.id)
        if self.conns.pop(conn.id, None) is not None:
            self.kernel.disconnected(conn.id)
            self.wake()

    def bad_frame(self, conn: server.Connection, error) -> None:
        """A frame that is not a JSON object: an error reply in its turn."""
        self.kernel.refuse(conn.id, None, RequestError(Code.BAD_REQUEST, str(error)))
        self.wake()

    def request(self, conn: server.Connection, obj: dict) -> None:
        rid, within = obj.get("id"), 0.0
        try:
            if not isinstance(rid, requests.ID_TYPES):  # its reply echoes it, in either codec
                rid = None
                raise RequestError(Code.BAD_REQUEST, "id must be a number or a string")
            req = requests.parse(obj)
        except RequestError as e:
            self.kernel.refuse(conn.id, rid, e)
        except Exception as e:  # a check that missed a case: that request is refused, nothing else
            log.exception("%s: a request could not be read", self.host)
            self.kernel.refuse(conn.id, rid, RequestError(Code.BAD_REQUEST, f"request not understood: {e!r}"))
        else:
            if isinstance(req, Hello) and obj.get("binary") is True:
                conn.binary = True
            if isinstance(req, Status):  # administrative: answered at once, no process name needed
                conn.answer(Reply(conn.id, rid, StatusReport(self.status())).wire())
                return
            if isinstance(req, Codec):  # the answer in the old codec, then the new one both ways
                conn.answer(Reply(conn.id, rid, CodecSwitched(req.name)).wire())
                conn.use(req.name)
                return
            try:
                within = self.kernel.request(conn.id, rid, req, time.monotonic(), prior(self.cp, req))
            except Exception as e:  # a bug: the core may be half changed, so it is rebuilt from the checkpoint
                log.exception("%s: a request failed", self.host)
                self._recover(f"a request failed: {e!r}", disk_full=False)
                return
        self._answered.discard(conn.id)
        if within and not self._pass_pending:  # a RECV that waits: the next pass will do
            self._wake_at(time.monotonic() + within)
        elif self._answered:
            self._gather()
        else:
            self.wake()

    def status(self) -> dict:
        s = self.kernel.status()
        s.update(pid=os.getpid(), uptime=round(time.time() - self.started, 3))
        s["counters"].update(passes=self.passes, commits=self.cp.commits, trace_errors=self.trace.errors,
                             recoveries=len(self._recoveries))
        return s

    # -- waking the loop ----------------------------------------------------------------------
    def wake(self) -> None:
        """Something changed: run one pass soon (once, however many things changed). Group
        commit: the pass waits one more turn of the loop, so the requests of the processes
        answered by the last pass, ready by then, share its commit (BENCHMARKS.md, issue 15)."""
        if self._gathering is not None:  # a pass that waits for processes: it waits no longer
            self._gathering.cancel()
            self._gathering = None
        elif self._pass_pending:
            return
        self._pass_pending = True
        self.loop.call_soon(self.loop.call_soon, self.run_pass)

    def _gather(self) -> None:
        """A request while processes the last commit answered are still to ask again: the pass
        waits for them up to GATHER_WAIT, so that their requests share its commit (as a database's
        commit_delay does). The last of them to ask, or anything else, runs it at once."""
        if not self._pass_pending:
            self._pass_pending = True
            self._gathering = self.loop.call_later(GATHER_WAIT, self.run_pass)

    def _wake_at(self, when: float) -> None:
        """Run a pass at monotonic time `when` (a RECV timeout or a line timer)."""
        if self._timer_at is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._timer_fired)

    def _rearm(self, when: float | None) -> None:
        """After a pass: the core's deadline is every time it must run again, so a timer set
        before for an earlier one (a frame's trace, a wait that ended) goes, and costs no pass."""
        if when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        if when is not None:
            self._wake_at(when)

    def _timer_fired(self) -> None:
        self._timer = self._timer_at = None
        self.wake()

    # -- one pass -------------------------------------------------------------------------------
    def run_pass(self) -> None:
        self._pass_pending = False
        if self._gathering is not None:
            self._gathering.cancel()
            self._gathering = None
        self.passes += 1
        now = time.monotonic()
        if now - self._keys_checked >= KEYS_CHECK:
            self._reload_keys(now)
        try:
            fx = self.kernel.run_pass(now, time.time())
        except Exception as e:  # a bug: the core may be half changed, so it is rebuilt from the checkpoint
            log.exception("%s: a pass failed", self.host)
            self._recover(f"a pass failed: {e!r}", disk_full=False)
            return
        try:
            perform(fx, self.cp, self)
        except CheckpointFull as e:
            self._recover(str(e), disk_full=True)
            return
        except (sqlite3.Error, ValueError, OverflowError) as e:  # ValueError, OverflowError: a value SQLite refuses
            self._recover(f"checkpoint write failed: {e!r}", disk_full=False)
            return
        self._answered = {reply.conn for reply in fx.replies} if fx.changes else set()
        if fx.changes and now - self._space_checked >= SPACE_CHECK:
            self._check_space(now)
        self._rearm(fx.deadline)
        self._writes_at(fx.write_at)

    def _writes_at(self, when: float | None) -> None:
        if self._writes is not None:
            if when is not None and self._writes.when() == when:  # (most passes: none, or the same)
                return
            self._writes.cancel()
        self._writes = None if when is None else self.loop.call_at(when, self._write_paced)

    def _write_paced(self) -> None:
        """The pieces of long frames built already (Kernel.write_paced): a write, not a pass."""
        self._writes = None
        fx = self.kernel.write_paced(time.monotonic())
        write_lines(fx.writes, self)
        if fx.deadline is not None:
            self._wake_at(fx.deadline)
        self._writes_at(fx.write_at)

    # -- the shell's part of a pass (mccs.daemon.driver.Shell) ----------------------------------------------
    def emit_trace(self, ev: TraceEvent) -> None:
        self.trace.write(ev)

    def flush_traces(self) -> None:
        self.trace.flush()

    def pieces_read(self, pieces: list[tuple[Stored, int, bytes]]) -> None:
        self.kernel.pieces_read(pieces)

    def send_reply(self, reply: Reply) -> None:
        """A reply, framed as its wire(); a large message's text is read from the checkpoint as it is written."""
        conn = self.conns.get(reply.conn)
        if conn is None:  # gone meanwhile
            return
        body, stored = reply.wire(), reply.stored
        if stored is None:
            conn.answer(body)
        elif conn.binary:
            conn.answer({**body, "bin": stored.size}, reply_text(self.cp, reply))
        else:  # an older client: the whole text in base64
            conn.answer({**body, "msg": {**body["msg"], "data": b64(b"".join(reply_text(self.cp, reply)))}})

    async def _run_program(self, start: StartProgram) -> None:
        """A `[[process]] start` program, with MCCS_CONFIG and MCCS_NAME set; the core hears when it ends."""
        name = start.pid[2:].rstrip()
        env = {**os.environ, "MCCS_CONFIG": os.path.abspath(self.cfg.path), "MCCS_NAME": name}
        try:
            proc = await asyncio.create_subprocess_exec(*shlex.split(start.command), env=env,
                                                        stdin=asyncio.subprocess.DEVNULL)
        except OSError as e:
            log.error("%s: the program of %s did not start: %s: %s", self.host, name, start.command, e)
            code = 127
        else:
            log.info("%s: started the program of %s, pid %d", self.host, name, proc.pid)
            self.programs.add(proc)
            code = await proc.wait()
            self.programs.discard(proc)
        self.kernel.program_exited(start.pid, code, time.monotonic())
        self.wake()

    def write_line(self, peer: str, data: bytes) -> None:
        self.ports[peer].write(data)

    def set_dtr(self, peer: str, level: bool) -> None:
        self.ports[peer].set_dtr(level)

    def start_program(self, start: StartProgram) -> None:
        self.loop.create_task(self._run_program(start))

    # -- a failed pass, a full disk -------------------------------------------------------------
    def _recover(self, why: str, disk_full: bool) -> None:
        """The pass is rolled back; rebuild the core from the checkpoint, as a restart would."""
        now = time.monotonic()
        self._say_rolled_back(why, disk_full, now)
        if not disk_full:
            self._recoveries = [t for t in self._recoveries if now - t < RECOVERY_WINDOW] + [now]
            if len(self._recoveries) >= RECOVERY_LIMIT:
                log.critical("%s: %d failed passes within %.0f s; stopping (the checkpoint is intact)",
                             self.host, len(self._recoveries), RECOVERY_WINDOW)
                self.failed = True
                self._stopping.set()
                return
        counters = self.kernel.counters
        self._writes_at(None)
        self.kernel = self._core()
        self.kernel.counters.update(counters)
        self.kernel.set_disk_full(disk_full)
        for conn in list(self.conns.values()):
            assert conn.transport is not None  # connected() comes from its connection_made
            conn.transport.abort()  # the library reconnects and asks again
        for peer, port in self.ports.items():
            if port.is_open:
                self.kernel.port_state(peer, True, "", now)
        if disk_full:
            self._arm_probe()
        self.wake()

    def _say_rolled_back(self, why: str, disk_full: bool, now: float) -> None:
        """On a full disk the clients dropped ask again at once and may fail so again and again:
        that is said once every FULL_PROBE seconds, with how many failed, not each time."""
        if disk_full:
            self._full_failures += 1
            if now - self._full_said < FULL_PROBE:
                return
            if self._full_failures > 1:
                why += f" ({self._full_failures} passes failed so since it was last said)"
            self._full_said, self._full_failures = now, 0
        log.error("%s: %s; the pass was rolled back, the lists are restored from the checkpoint", self.host, why)

    def _check_space(self, now: float) -> None:
        self._space_checked = now
        if not self.kernel.disk_full and self.cp.free_bytes() < self.cfg.disk_reserve:
            self.kernel.set_disk_full(True)
            self._arm_probe()

    def _arm_probe(self) -> None:
        if self._probe is None:
            self._probe = self.loop.call_later(FULL_PROBE, self._probe_space)

    def _probe_space(self) -> None:
        self._probe = None
        if self.cp.free_bytes() >= self.cfg.disk_reserve and self.cp.can_write(4096 + self.cfg.max_message):
            self.kernel.set_disk_full(False)
            self.wake()
        else:
            self._arm_probe()
