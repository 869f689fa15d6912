"""MCCS hosts in memory: the daemon's core (`mccs.core.kernel.Kernel`) without its asyncio shell.

A `SimNet` runs hosts on a virtual clock (its wall clock a real date, WALL0 on: what the
daemons stamp, such as a notice's time, is as long as in use). Each host is a Kernel with the
daemon's checkpoint store held in memory (`Checkpoint.in_memory`: no disk). Its pass effects are
performed as the daemon performs them, through the daemon's own driver (mccs.daemon.driver):
changes applied and committed, then trace events kept (`SimHost.traces`), replies delivered to
the simulated processes, bytes written to in-memory lines (`mccs.testbed.linesim.Channel`, with
impairments), programs to start recorded (`SimHost.starts`).
`crash()` throws a host's memory away, uncommitted effects and all, and restores it from its
checkpoint, as kill -9 and a restart would. No threads, no sockets, no real time.

A host runs a pass only when the daemon would: after an input (bytes from a line, a request, a
port or carrier change), within the time the core answers it needs, or at the deadline of its
last pass; a line machine's answer to bytes is written at once, as the shell writes it. The clock
jumps from event to event (at most `max_step` at a time), so idle hosts cost nothing. A port hands
its host the pieces of a paced async frame (frame abort) in one read, once the last has come.

    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]})
    p, r = net.client("AA", "P"), net.client("BB", "R")
    msg_id = p.send("BBR", b"hi")["msg_id"]
    assert r.recv()["msg"]["msg_id"] == msg_id
"""
from __future__ import annotations

import heapq
import itertools
import random
from pathlib import Path

from checkpoint.changes import Stored
from checkpoint.store import RESTORED, Checkpoint
from mccs.core import requests
from mccs.config import HostConfig, LineConfig, ProcessConfig
from mccs.daemon.driver import perform, prior, reply_text, write_lines
from mccs.core.e2e import Keyring
from mccs.core.effects import Effects, Reply, StartProgram, TraceEvent
from mccs.core.kernel import Kernel
from mccs.core.sessions import Creds

from linedrivers.async_frames import FLAG  # (what ends every async frame, whole or cut short)
from mccs.testbed.hayes_modem import HayesModem
from mccs.testbed.linesim import Channel

WRITE = "write"  # an event of the network (SimNet._events): a host's paced writes are due
HELD_AT_MOST = 1.0  # seconds the pieces of an async frame wait at its port for the rest (SimNet.write)
HELD = "held"  # an event of the network: the pieces of a frame at a port, if the rest has not come
WALL0 = 1_800_000_000.0  # the simulated wall clock at time 0: January 2027


def line(peer: str, **keys) -> LineConfig:
    """A line's config for a simulated host: short timers, async unless `protocol` says otherwise, and
    no frame abort unless asked: its paced writes would hold a simulated line, instant unless given a
    baud, to the config's 9600."""
    return LineConfig(peer=peer, port=f"sim://{peer}", **{"reply_timeout": 0.5, "keepalive": 5.0,
                                                           "backoff_max": 2.0, "frame_abort": False, **keys})


class SimHost:
    def __init__(self, net: "SimNet", cfg: HostConfig):
        self.net, self.cfg, self.id = net, cfg, cfg.id
        self.random = random.Random(f"{net.seed}/{cfg.id}")  # sessions, nonces, epochs: seeded, a run repeats
        self.cp = Checkpoint.in_memory(cfg.id, self.random.randbytes)  # the daemon's store, without a disk
        self.keys = Keyring(cfg.id)  # its end-to-end keys: the test gives them (mccs.core.e2e)
        self.kernel = self._core()
        self.inbox: dict[int, list[dict]] = {}
        self.passes: list[Effects] = []  # every pass's effects, oldest first (if the net records)
        self.pass_count = 0
        self.busiest = 0  # the most passes it ran in one simulated second (a host that spins shows here)
        self._second, self._in_second = -1, 0
        self.traces: list[TraceEvent] = []  # every trace event written, oldest first (if the net records)
        self.starts: list[StartProgram] = []  # every program the daemon would have started
        self.fail_next_commit = False
        self.crash_when = None  # a predicate of a pass's Effects: crash instead of committing that pass
        self._conns = itertools.count(1)
        self._due: float | None = None
        self.due = 0.0
        self.write_at: float | None = None  # when the core's paced writes are due (Kernel.write_paced)

    @property
    def due(self) -> float | None:
        """When its next pass runs: after an input or at the core's deadline (None: no pass needed)."""
        return self._due

    @due.setter
    def due(self, at: float | None) -> None:
        if at is not None and at != self._due:  # (the same time is in the network's events already)
            self.net.schedule(at, self.id)
        self._due = at

    def _core(self) -> Kernel:
        return Kernel(self.cfg, self.cp.restore(), random_bytes=self.random.randbytes, keys=self.keys)

    def open_ports(self) -> None:
        for peer in self.kernel.lines.lcbs:
            self.port_state(peer, True, "")

    # -- inputs, as the daemon's shell hands them to the core: each says when a pass must follow ------
    def wake(self, within: float | None = 0.0) -> None:
        """A pass within `within` seconds (None: none is needed for this input)."""
        if within is not None:
            at = self.net.now + within
            self.due = at if self.due is None else min(self.due, at)

    def line_data(self, peer: str, data: bytes) -> None:
        """Bytes from a line; the machine's answer is written at once, as the shell writes it."""
        within = self.kernel.line_data(peer, data, self.net.now)
        answer = self.kernel.line_answers(peer)
        if answer:
            self.write_line(peer, answer)
        self.wake(within)

    def port_state(self, peer: str, is_open: bool, why: str) -> None:
        self.kernel.port_state(peer, is_open, why, self.net.now, self.net.modem_lines)
        self.wake()

    def carrier(self, peer: str, on: bool) -> None:
        self.kernel.carrier(peer, on, self.net.now)
        self.wake()

    def program_exited(self, pid: str, code: int) -> None:
        self.kernel.program_exited(pid, code, self.net.now)
        self.wake()

    def set_disk_full(self, flag: bool) -> None:
        self.kernel.set_disk_full(flag)
        self.wake()

    def run_pass(self) -> Effects:
        fx = self.kernel.run_pass(self.net.now, WALL0 + self.net.now)
        self._counted()
        if self.net.record:
            self.passes.append(fx)
        self._due = None  # (its event was taken: a deadline of now is scheduled again)
        self.due = fx.deadline
        if self.crash_when is not None and self.crash_when(fx):
            self.crash_when = None
            self.crash()
            return fx
        if self.fail_next_commit:  # the commit failed: nothing after it leaves the host
            self.fail_next_commit = False
            return fx
        perform(fx, self.cp, self)
        self._writes_at(fx.write_at)
        return fx

    def write_paced(self) -> None:
        """The core's paced writes, as the daemon's shell makes them: no pass."""
        fx = self.kernel.write_paced(self.net.now)
        write_lines(fx.writes, self)
        if fx.deadline is not None:
            self.wake(max(0.0, fx.deadline - self.net.now))
        self._writes_at(fx.write_at)

    def _writes_at(self, at: float | None) -> None:
        if at is not None and at != self.write_at:  # (the same time is in the network's events already)
            self.net.schedule(at, (WRITE, self.id))
        self.write_at = at

    def _counted(self) -> None:
        self.pass_count += 1
        second = int(self.net.now)
        self._in_second = self._in_second + 1 if second == self._second else 1
        self._second = second
        self.busiest = max(self.busiest, self._in_second)

    # -- the simulated shell (mccs.daemon.driver.Shell) ------------------------------------------------------
    def emit_trace(self, ev: TraceEvent) -> None:
        """Kept, stamped as the daemon's writer stamps it: with the pass's wall time unless it has one."""
        if self.net.record:
            self.traces.append(ev if ev.at is not None else ev._replace(at=WALL0 + self.net.now))

    def flush_traces(self) -> None:
        pass  # kept in memory: nothing to flush

    def send_reply(self, reply: Reply) -> None:
        """Delivered as a client reads it: its wire() object (a large message's text in `data`,
        read from the checkpoint as the daemon does)."""
        body, stored = reply.wire(), reply.stored
        if stored is not None:
            body["msg"]["data"] = _b64(b"".join(reply_text(self.cp, reply)))
        self.inbox.setdefault(reply.conn, []).append(body)
        self.net.replied.add(self.id)

    def pieces_read(self, pieces: list[tuple[Stored, int, bytes]]) -> None:
        self.kernel.pieces_read(pieces)

    def write_line(self, peer: str, data: bytes) -> None:
        self.net.write(self.id, peer, data)

    def set_dtr(self, peer: str, level: bool) -> None:
        self.net.set_dtr(self.id, peer, level)

    def start_program(self, start: StartProgram) -> None:
        self.starts.append(start)

    def crash(self) -> None:
        """kill -9 and a restart: memory gone, the checkpoint as of the last commit."""
        self.kernel = self._core()
        self.inbox.clear()
        self._due = self.write_at = None  # (their events may have been passed over while it was away)
        self.wake()
        self.open_ports()

    def renew(self) -> None:
        """`mccs daemon --new-checkpoint` after the checkpoint was lost: a new epoch, MSG_IDs from 1,
        nothing remembered."""
        self.cp.close()
        self.cp = Checkpoint.in_memory(self.id, self.random.randbytes)
        self.crash()

    def backup(self) -> Checkpoint:
        """`mccs checkpoint backup`: a copy of the checkpoint as of the last commit, marked as a
        backup (the daemon that opens it renews the host)."""
        copy = Checkpoint.in_memory(self.id, self.random.randbytes)
        self.cp.conn.backup(copy.conn)
        copy.conn.execute("INSERT INTO meta (key, value) VALUES (?, 'simulated')", (RESTORED,))
        return copy

    def restore(self, backup: Checkpoint) -> None:
        """The host's disk lost and `backup` put in its place (as a copy), then the daemon started."""
        self.cp.close()
        self.cp = Checkpoint.in_memory(self.id, self.random.randbytes)
        backup.conn.backup(self.cp.conn)
        self.cp.renew_if_restored()
        self.crash()

    def client(self, name: str | None, creds: Creds | None = None) -> "SimClient":
        conn = next(self._conns)
        self.kernel.connected(conn, creds)
        self.wake()
        c = SimClient(self, conn)
        if name is not None:
            c.ask({"op": "hello", "name": name})
        return c


class SimClient:
    """A process on a simulated host: requests as dicts, replies as dicts."""

    def __init__(self, host: SimHost, conn: int):
        self.host, self.conn = host, conn
        self._rids = itertools.count(1)

    def request(self, obj: dict) -> int:
        """Hand a request to the kernel as the daemon would; returns its request id."""
        rid = next(self._rids)
        try:
            req = requests.parse(obj)
        except requests.RequestError as e:
            self.host.kernel.refuse(self.conn, rid, e)
            self.host.wake()
            return rid
        self.host.wake(self.host.kernel.request(self.conn, rid, req, self.host.net.now, prior(self.host.cp, req)))
        return rid

    def reply(self, rid: int) -> dict | None:
        for body in self.host.inbox.get(self.conn, []):
            if body.get("id") == rid:
                self.host.inbox[self.conn].remove(body)
                return body
        return None

    def ask(self, obj: dict, until: float | None = None) -> dict:
        """A request and its reply, running the network until it comes (AssertionError if not)."""
        rid = self.request(obj)
        got = self.host.net.run(lambda: self.reply(rid), until=until)
        assert got is not None, f"no reply to {obj} by t={self.host.net.now:.2f}"
        return got

    def send(self, to: str, data: bytes, **keys) -> dict:
        return self.ask({"op": "send", "to": to, "data": _b64(data), **keys})

    def recv(self, confirm: bool = True, **keys) -> dict:
        reply = self.ask({"op": "recv", **keys})
        if confirm and reply.get("msg") and "rid" in reply["msg"]:  # a copy has nothing to confirm
            assert self.ask({"op": "confirm", "rid": reply["msg"]["rid"]})["ok"]
        return reply

    def close(self) -> None:
        self.host.kernel.disconnected(self.conn)
        self.host.wake()


def _pair(a: str, b: str) -> tuple[str, str]:
    """The two ends of a line in order: its channel's key."""
    return (a, b) if a <= b else (b, a)


def _b64(data: bytes) -> str:
    import base64
    return base64.b64encode(data).decode()


class SimNet:
    def __init__(self, directory: str | Path, hosts: dict[str, list[LineConfig]], *, seed: int = 0,
                 processes: dict[str, list[ProcessConfig]] | None = None, modems: bool = False,
                 modem_lines: bool = False, max_step: float = 1.0, record: bool = True, **host_keys):
        """`modems`: an emulated Hayes modem at each end of every line (mccs.testbed.hayes_modem; the
        ends of the i-th line, hosts sorted, are 5iii1 and 5iii2: `number`); `modem_lines`: their
        ports have DTR and DCD (else, as a pty, neither). `max_step`: the most the clock moves in one
        step when nothing is due sooner (what `run` polls its `done` by). `record`: keep every pass's
        effects and trace events on its host (tests look at them; a large network cannot)."""
        self.now = 0.0
        self.record = record
        self.modem_lines = modem_lines
        self._dcd: dict[tuple[str, str], bool] = {}  # (host, peer): DCD as last told to the host
        self.max_step = max_step
        self.seed = seed
        self.dir = Path(directory)
        self.channels: dict[tuple[str, str], Channel] = {}
        # What is due when, oldest first: a host's pass (its id), its paced writes (WRITE, its id),
        # bytes arriving at a host (the channel's key and the side they arrive at), or pieces held
        # at its port (those and HELD). Entries that no longer hold are passed over.
        self._events: list[tuple[float, int, str | tuple[str, ...]]] = []
        self._order = itertools.count()
        self.hosts: dict[str, SimHost] = {}
        self.replied: set[str] = set()  # hosts that handed a process a reply (a watcher empties it)
        for hid, lines in hosts.items():
            cfg = HostConfig(id=hid, socket=str(self.dir / f"{hid}.sock"), checkpoint=str(self.dir / f"{hid}.db"),
                             trace_dir=str(self.dir / hid), lines=lines,
                             processes=(processes or {}).get(hid, []), **host_keys)
            cfg.check()
            self.hosts[hid] = SimHost(self, cfg)
            for lc in lines:
                self.channels.setdefault(_pair(hid, lc.peer), Channel(seed=seed))
        # (host, peer) of the async lines whose frames go in paced pieces (frame abort): their
        # receiving port hands the reader a frame's bytes once its last piece has come, as one
        # read, or HELD_AT_MOST after a piece if none follows (a port reads in pieces of its own;
        # the deframer takes any; this spares the network a read of the receiver per piece)
        self._paced = {(hid, lc.peer) for hid, h in self.hosts.items() for lc in h.cfg.lines
                       if lc.protocol == "async" and lc.frame_abort and not modems}
        self._held: dict[tuple[str, str, str], float] = {}  # a port holding pieces -> until when
        self.modems: dict[tuple[str, str], tuple[HayesModem, HayesModem]] = {}
        self._to_dte: list[tuple[str, str, bytes]] = []  # what the modems said, for the next step
        for i, (a, b) in enumerate(sorted(self.channels) if modems else []):
            ends = HayesModem(f"5{i:03d}1", 9600), HayesModem(f"5{i:03d}2", 9600)
            ends[0].other, ends[1].other = ends[1], ends[0]
            self.modems[a, b] = ends
        for host in self.hosts.values():
            host.open_ports()

    def __getitem__(self, hid: str) -> SimHost:
        return self.hosts[hid]

    def client(self, hid: str, name: str | None) -> SimClient:
        return self.hosts[hid].client(name)

    def channel(self, a: str, b: str) -> Channel:
        return self.channels[_pair(a, b)]

    def number(self, host: str, peer: str) -> str:
        """The number of host's modem on its line to peer (modems=True)."""
        return self.modems[_pair(host, peer)][host > peer].number

    def write(self, src: str, dst: str, data: bytes) -> None:
        ch = self.channel(src, dst)
        if self.modems:
            data = self._modem(src, dst).from_dte(data, self.now)
            self._said()
        if dst in self.hosts:
            pipe = ch.outof("a" if src < dst else "b")
            before = pipe.next_arrival()
            pipe.write(data, self.now)
            arrival = pipe.last_arrival()
            where = (*_pair(src, dst), "b" if src < dst else "a")
            if (src, dst) in self._paced and data[-1] != FLAG:  # a piece of a frame: the rest follows
                if where not in self._held:  # (from the first piece held)
                    self._held[where] = at = (arrival or self.now) + HELD_AT_MOST
                    self.schedule(at, (*where, HELD))
            else:
                self._held.pop(where, None)
                if arrival is not None and arrival != before:
                    self.schedule(arrival, where)

    def schedule(self, at: float, what: str | tuple[str, ...]) -> None:
        heapq.heappush(self._events, (at, next(self._order), what))

    def _modem(self, host: str, peer: str) -> HayesModem:
        return self.modems[_pair(host, peer)][host > peer]

    def set_dtr(self, host: str, peer: str, level: bool) -> None:
        self._modem(host, peer).set_dtr(level, self.now)
        self._said()

    def _carriers(self) -> None:
        """DCD changes, to the hosts whose ports have modem lines."""
        for (a, b), ends in self.modems.items() if self.modem_lines else ():
            for modem, hid, peer in ((ends[0], a, b), (ends[1], b, a)):
                if self._dcd.get((hid, peer), False) != modem.dcd and hid in self.hosts:
                    self._dcd[hid, peer] = modem.dcd
                    self.hosts[hid].carrier(peer, modem.dcd)

    def _said(self) -> None:
        """What the modems say to their hosts, for the next step."""
        for (a, b), ends in self.modems.items():
            for modem, hid, peer in ((ends[0], a, b), (ends[1], b, a)):
                said = modem.to_dte()
                if said:
                    self._to_dte.append((hid, peer, said))

    def next_event(self) -> float | None:
        """When something next happens: a host's pass, bytes arriving, a modem's timer."""
        events = self._events
        while events and isinstance(what := events[0][2], str) and self._stale(events[0][0], what):
            heapq.heappop(events)
        times: list[float | None] = [events[0][0]] if events else []
        times += [m.next_deadline() for ends in self.modems.values() for m in ends]
        if self._to_dte:
            times.append(self.now)
        return min((t for t in times if t is not None), default=None)

    def _stale(self, at: float, hid: str) -> bool:
        host = self.hosts.get(hid)
        return host is None or host.due != at

    def step(self, limit: float | None = None) -> None:
        """Move the clock to the next event (at most `max_step` on, and not past `limit`), deliver
        what has arrived, and run a pass on each host that has something to do then, as the daemon
        does: after an input (within the time the core asked for) or at the core's deadline. A host
        with nothing to do costs nothing, so a large network runs at the speed of its traffic."""
        upto = self.now + self.max_step if limit is None else min(self.now + self.max_step, max(limit, self.now))
        at = self.next_event()
        self.now = min(max(upto if at is None else at, self.now + 1e-4), upto)
        for ends in self.modems.values():
            for modem in ends:
                modem.tick(self.now)
        self._said()
        self._carriers()
        said, self._to_dte = self._to_dte, []
        for hid, peer, data in said:
            self.hosts[hid].line_data(peer, data)
        due: set[str] = set()
        while self._events and self._events[0][0] <= self.now:
            at, _, what = heapq.heappop(self._events)
            if isinstance(what, str):
                due.add(what)
                continue
            if len(what) == 2:  # (WRITE, host)
                host = self.hosts.get(what[1])
                if host is not None and host.write_at == at:
                    host.write_at = None  # (its event is taken)
                    host.write_paced()
                continue
            if len(what) == 4:  # (a, b, side, HELD): pieces whose rest has not come
                what = what[:3]
                if self._held.get(what) != at:
                    continue
                del self._held[what]
            a, b, side = what
            hid, peer = (a, b) if side == "a" else (b, a)
            data = self.channels[a, b].towards(side).take(self.now)
            if data and self.modems:
                data = self._modem(hid, peer).from_wire(data)
            if data and hid in self.hosts:
                self.hosts[hid].line_data(peer, data)
        for hid in sorted(due):
            host = self.hosts.get(hid)
            if host is not None and host.due is not None and host.due <= self.now:
                host.run_pass()

    def run(self, done=lambda: None, until: float | None = None, duration: float = 60.0):
        """Step until `done()` returns something truthy (returned) or the time runs out (None)."""
        end = until if until is not None else self.now + duration
        while self.now <= end:
            got = done()
            if got:
                return got
            self.step(limit=end + 1e-4)
        return done() or None
