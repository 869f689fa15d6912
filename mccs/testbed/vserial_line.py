"""One virtual null-modem serial line: two pty pairs joined by a relay thread, with faults.

A pty enforces no baud rate and never loses a byte, so the relay does what a real line
would: it paces each direction to the baud (10 bit times per byte, 8N1), adds a one-way
latency, flips bits at a bit-error rate, drops and inserts bytes, and can go silent
(`disconnect`, a cable pulled) or vanish (`hangup`, a USB adapter pulled: readers see a
hang-up and the device names disappear until `reconnect`). Each end is a stable symlink
to its pty slave, so a program opens `end_a` with any serial library, pyserial included.

    with Line("/tmp/vs/AA.BB", "/tmp/vs/BB.AA", baud=9600, ber=1e-4) as line:
        ...                       # open the two paths as serial ports
        line.disconnect(); line.reconnect(); line.hangup(); line.reconnect()

With `modems=("5551001", "5551002")` each end is a Hayes modem with that number (mccs.testbed.
hayes_modem): the line carries bytes only during a call, which the programs make with AT
commands; `line.modems[0].faults.busy = True` and the like make faults on demand.
"""
from __future__ import annotations

import collections
import ctypes
import itertools
import math
import os
import random
import select
import sys
import threading
import time
import tty
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, TextIO

from mccs.testbed.hayes_modem import HayesModem

#: Relay wakes at most this often while bytes are in flight: pacing is per chunk, not per byte.
QUANTUM = 0.001
#: Bytes a direction holds in flight (a UART's buffer); beyond it the relay stops reading the
#: sender, whose pty buffer then fills and its writes block, as with a real port.
BUFFER = 4096
PR_SET_TIMERSLACK = 29  # linux/prctl.h
ACTIONS = ("disconnect", "hangup", "reconnect")

LogSink = Callable[[str, bytes, float], None]


@dataclass
class _Direction:
    """One direction of the line: the bytes in flight and its impairment state."""
    name: str  # "a>b" or "b>a"
    rng: random.Random
    # [t0, bytearray]: byte k arrives at t0+(k+1)*bt
    segments: collections.deque = field(default_factory=collections.deque)
    line_free: float = 0.0  # when the transmitter finishes the last byte it accepted
    backlog: int = 0
    stalled: bool = False  # the receiving pty is full (nobody reads it)
    next_error: int = 0  # bits to pass before the next flipped bit
    counters: dict = field(default_factory=lambda: dict.fromkeys(
        ("bytes_in", "bytes_out", "bits_flipped", "dropped", "inserted", "discarded"), 0))

    def clear(self, now: float) -> None:
        self.counters["discarded"] += self.backlog
        self.segments.clear()
        self.backlog, self.line_free, self.stalled = 0, now, False


class _Pty:
    """A pty pair in raw mode; the relay keeps the slave open so the master never sees EIO
    and bytes written before a reader opens the slave are kept, not echoed."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        os.set_blocking(self.master, False)
        self.name = os.ttyname(self.slave)

    def close(self) -> None:
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


def _precise_timers() -> None:
    """Wake this thread when its timeouts end, not up to 50 us later (Linux's default timer
    slack): a byte delivered late is latency a real wire does not add (BENCHMARKS.md)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the default slack
        pass


def _symlink(target: str, path: str) -> None:
    """Point path at target atomically; refuse to replace anything but a symlink."""
    if os.path.lexists(path) and not os.path.islink(path):
        raise FileExistsError(f"{path} exists and is not a symlink")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}.{threading.get_ident()}"
    os.symlink(target, tmp)
    os.replace(tmp, path)


def _unlink(path: str) -> None:
    if os.path.islink(path):
        os.unlink(path)


def flap(up: float, down: float, action: str = "disconnect") -> Iterator[tuple[float, str]]:
    """An endless schedule: up for `up` seconds, then `action` for `down` seconds, and again."""
    for k in itertools.count():
        yield k * (up + down) + up, action
        yield (k + 1) * (up + down), "reconnect"


class Line:
    """A null-modem line between two symlinked pty ends (see the module docstring).

    Extra keywords: drop / insert (per-byte probabilities of losing a byte or adding a random
    one), schedule (iterable of (seconds after start, "disconnect"|"hangup"|"reconnect"),
    in time order, e.g. `flap(5, 1)`), tamper (a relay that changes what it carries, for tests of
    line authentication: a callable(direction, bytes read) returning the bytes to put on the line
    instead; it may hold bytes back and send them with a later call; it can be set while running).
    `log` is a path (one line per delivered chunk: epoch time, direction, hex) or a
    callable(direction, data, monotonic time); direction is "a>b", "b>a", or "event" with data
    b"hangup" etc.
    """

    def __init__(self, end_a: str, end_b: str, baud: int = 9600, latency: float = 0.0,
                 ber: float = 0.0, seed: int | None = None, log: str | LogSink | None = None, *,
                 drop: float = 0.0, insert: float = 0.0,
                 schedule: Iterable[tuple[float, str]] = (),
                 tamper: Callable[[str, bytes], bytes] | None = None,
                 modems: tuple[str, str] | None = None) -> None:
        if baud <= 0 or latency < 0 or not all(0 <= p < 1 for p in (ber, drop, insert)):
            raise ValueError("baud must be > 0, latency >= 0, ber/drop/insert in [0, 1)")
        self.end_a, self.end_b = os.path.abspath(end_a), os.path.abspath(end_b)
        self.baud, self.latency, self.ber, self.drop, self.insert = baud, latency, ber, drop, insert
        self.byte_time = 10.0 / baud
        self.tamper = tamper
        self.modems: tuple[HayesModem, HayesModem] | None = None
        if modems is not None:
            a, b = HayesModem(modems[0], baud), HayesModem(modems[1], baud)
            a.other, b.other = b, a
            self.modems = (a, b)
        rng = random.Random(seed)
        self._dirs = (_Direction("a>b", random.Random(rng.random())), _Direction("b>a", random.Random(rng.random())))
        for d in self._dirs:
            d.next_error = self._error_gap(d.rng)
        self._schedule = iter(schedule)
        self._next_action = next(self._schedule, None)
        if isinstance(log, (str, os.PathLike)):
            self._log_file: TextIO | None = open(log, "a", buffering=1)
            self._log: LogSink | None = self._write_log
        else:
            self._log_file, self._log = None, log
        self._ptys: tuple[_Pty, _Pty] | None = None
        self.state = "closed"  # connected, disconnected, hungup, closed
        self._commands: collections.deque = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._thread: threading.Thread | None = None
        self._stop = False
        self._started = 0.0
        self.devices: tuple[str, str] = ("", "")

    # ---- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> "Line":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "Line":
        self._started = time.monotonic()
        self._connect(self._started)
        self._thread = threading.Thread(target=self._relay, name=f"vserial {os.path.basename(self.end_a)}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the relay, close the ptys and remove the symlinks."""
        if self._thread:
            self._stop = True
            os.write(self._wake_w, b"x")
            self._thread.join()
            self._thread = None
        self._drop_ptys()
        self.state = "closed"
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1
        if self._log_file:
            self._log_file.close()

    # ---- commands (run in the relay thread; they return once done) ---------------------------
    def disconnect(self) -> None:
        """Go silent both ways, like a pulled cable: bytes written are lost, the ports stay open."""
        self._run_command("disconnect")

    def hangup(self) -> None:
        """Close the ptys: readers get a hang-up (EIO) and the end names vanish until reconnect()."""
        self._run_command("hangup")

    def reconnect(self) -> None:
        """Restore the line; after a hangup the ends are new ptys behind the same names."""
        self._run_command("reconnect")

    @property
    def counters(self) -> dict:
        return {d.name: dict(d.counters) for d in self._dirs}

    def _run_command(self, action: str) -> None:
        if not self._thread:
            self._apply(action, time.monotonic())
            return
        done = threading.Event()
        self._commands.append((action, done))
        os.write(self._wake_w, b"x")
        done.wait()

    def _apply(self, action: str, now: float) -> None:
        if action not in ACTIONS:
            raise ValueError(f"unknown line action {action!r}")
        self._emit("event", action.encode(), now)
        if action == "disconnect" and self.state == "connected":
            self.state = "disconnected"
            for d in self._dirs:
                d.clear(now)
        elif action == "hangup" and self.state in ("connected", "disconnected"):
            self._drop_ptys()
            self.state = "hungup"
        elif action == "reconnect":
            if self.state == "hungup":
                self._connect(now)
            elif self.state == "disconnected":
                self.state = "connected"
                for d in self._dirs:
                    d.clear(now)

    def _connect(self, now: float) -> None:
        self._ptys = (_Pty(), _Pty())
        self.devices = (self._ptys[0].name, self._ptys[1].name)
        _symlink(self.devices[0], self.end_a)
        _symlink(self.devices[1], self.end_b)
        for d in self._dirs:
            d.clear(now)
        self.state = "connected"

    def _drop_ptys(self) -> None:
        _unlink(self.end_a)
        _unlink(self.end_b)
        if self._ptys:
            for p in self._ptys:
                p.close()
            self._ptys = None
        self.devices = ("", "")

    # ---- the relay ----------------------------------------------------------------------------
    def _relay(self) -> None:
        _precise_timers()
        while not self._stop:
            now = time.monotonic()
            self._run_due(now)
            timeout = self._deliver(now)
            for modem in self.modems or ():
                at = modem.next_deadline()
                if at is not None:
                    timeout = at - now if timeout is None else min(timeout, at - now)
            if self._next_action is not None:
                until = self._started + self._next_action[0] - now
                timeout = until if timeout is None else min(timeout, until)
            readers, writers = [self._wake_r], []
            if self._ptys:
                for d, src, dst in self._routes():
                    if d.backlog < BUFFER:
                        readers.append(src.master)
                    if d.stalled:
                        writers.append(dst.master)
            try:
                readable, _, _ = select.select(readers, writers, [], None if timeout is None else max(timeout, 0.0))
            except (OSError, ValueError):
                continue  # a command closed an fd under us; recompute
            now = time.monotonic()
            if self._wake_r in readable:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            if self._ptys:
                for d, src, _ in self._routes():
                    if src.master in readable:
                        self._accept(d, src.master, now)

    def _routes(self):
        a, b = self._ptys
        return ((self._dirs[0], a, b), (self._dirs[1], b, a))

    def _run_due(self, now: float) -> None:
        while self._commands:
            action, done = self._commands.popleft()
            try:
                self._apply(action, now)
            finally:
                done.set()
        while self._next_action is not None and self._started + self._next_action[0] <= now:
            self._apply(self._next_action[1], now)
            self._next_action = next(self._schedule, None)
        for modem in self.modems or ():
            modem.tick(now)
        self._modems_say()

    def _modems_say(self) -> None:
        """What the modems tell their DTEs (OK, RING, CONNECT, NO CARRIER), at once; out of a call
        nothing is in flight on the wire."""
        if self.modems is None:
            return
        for modem, pty in zip(self.modems, self._ptys or (None, None)):
            said = modem.to_dte()
            if said and pty is not None:
                try:
                    os.write(pty.master, said)
                except OSError:
                    pass  # nobody reads the port: what a modem says then is lost
        if not all(m.online for m in self.modems):
            for d in self._dirs:
                if d.backlog:
                    d.clear(time.monotonic())
    def _accept(self, d: _Direction, fd: int, now: float) -> None:
        try:
            data = os.read(fd, BUFFER)
        except OSError:
            return
        d.counters["bytes_in"] += len(data)
        if self.state != "connected" or not data:
            d.counters["discarded"] += len(data)
            return
        if self.modems is not None:  # the DTE talks to its modem; only a call's data goes on the wire
            data = self.modems[0 if d.name == "a>b" else 1].from_dte(data, now)
            self._modems_say()
            if not data:
                return
        if self.tamper is not None:
            data = self.tamper(d.name, data)
        kept = self._impair(d, bytearray(data))
        if not kept:
            return
        t0 = max(now, d.line_free)
        d.line_free = t0 + len(kept) * self.byte_time
        d.segments.append([t0 + self.latency, kept])
        d.backlog += len(kept)

    def _deliver(self, now: float) -> float | None:
        """Write every byte whose arrival time has come; return how long to sleep."""
        wait = None
        if not self._ptys:
            return None
        for d, _, dst in self._routes():
            d.stalled = False
            while d.segments:
                seg = d.segments[0]
                t0, data = seg
                n = min(len(data), int((now - t0) / self.byte_time + 1e-9))
                if n <= 0:  # sleep a quantum, but wake exactly for the last byte of a write
                    due = max(t0 + self.byte_time, min(t0 + len(data) * self.byte_time, now + QUANTUM)) - now
                    wait = due if wait is None else min(wait, due)
                    break
                try:
                    written = os.write(dst.master, data[:n])
                except BlockingIOError:
                    written = 0
                except OSError:
                    written = n  # the far end is gone: the bytes are lost on the wire
                if written:
                    self._emit(d.name, bytes(data[:written]), now)
                    del data[:written]
                    seg[0] = t0 + written * self.byte_time
                    d.backlog -= written
                    d.counters["bytes_out"] += written
                if written < n:
                    d.stalled = True
                    break
                if not data:
                    d.segments.popleft()
        return wait

    def _error_gap(self, rng: random.Random) -> int:
        """Bits until the next bit error: geometric with parameter ber."""
        if not self.ber:
            return sys.maxsize
        return int(math.log(1.0 - rng.random()) / math.log(1.0 - self.ber))

    def _impair(self, d: _Direction, data: bytearray) -> bytearray:
        bits = len(data) * 8
        while d.next_error < bits:
            data[d.next_error // 8] ^= 1 << (d.next_error % 8)
            d.counters["bits_flipped"] += 1
            d.next_error += 1 + self._error_gap(d.rng)
        d.next_error -= bits
        if not (self.drop or self.insert):
            return data
        out = bytearray()
        for byte in data:
            if self.insert and d.rng.random() < self.insert:
                out.append(d.rng.randrange(256))
                d.counters["inserted"] += 1
            if self.drop and d.rng.random() < self.drop:
                d.counters["dropped"] += 1
            else:
                out.append(byte)
        return out

    def _emit(self, direction: str, data: bytes, now: float) -> None:
        if self._log:
            self._log(direction, data, now)

    def _write_log(self, direction: str, data: bytes, now: float) -> None:
        assert self._log_file is not None  # _log is _write_log only with a log file
        wall = time.time() - (time.monotonic() - now)
        text = data.decode() if direction == "event" else data.hex()
        self._log_file.write(f"{wall:.6f} {direction} {text}\n")
