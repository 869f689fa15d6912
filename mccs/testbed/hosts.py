"""Host daemons as real separate processes, for tests, `mccs loopback`, the demo and benchmarks.

`write_config` writes a host's TOML; `DaemonProcess` starts `mccs daemon` on it, waits until it
answers on its socket, and stops it with SIGTERM or kills it with SIGKILL (a crash).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(directory: str | os.PathLike, host: str, lines: Sequence[dict] = (), routes: Sequence[dict] = (),
                 processes: Sequence[dict] = (), **host_keys) -> Path:
    """Write `<directory>/<host>.toml` with socket, checkpoint and trace_dir beside it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    keys = {"id": host, "socket": f"run/{host}.sock", "checkpoint": f"{host}.db", "trace_dir": f"trace/{host}",
            **host_keys}
    text = ["[host]"] + [f"{k} = {_toml_value(v)}" for k, v in keys.items()]
    for table, entries in (("line", lines), ("route", routes), ("process", processes)):
        for entry in entries:
            text += ["", f"[[{table}]]"] + [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    path = directory / f"{host}.toml"
    path.write_text("\n".join(text) + "\n")
    return path


def socket_answers(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def mccs_cli(*args: str, timeout: float, text: bool = True) -> subprocess.CompletedProcess:
    """`mccs ARGS...` in a child process, its output captured (tests and benchmarks)."""
    return subprocess.run([sys.executable, "-m", "mccs.cli", *args], capture_output=True, text=text, timeout=timeout)


class DaemonProcess:
    """`mccs daemon -c CONFIG` in a child process; its stderr goes to `<config>.log`."""

    def __init__(self, config: str | os.PathLike, env: dict | None = None, program: list[str] | None = None):
        from mccs.config import load
        self.program = program or [sys.executable, "-m", "mccs.cli"]  # what runs `daemon -c CONFIG`
        self.config = Path(config)
        self.cfg = load(self.config)
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.log_path = self.config.with_suffix(".log")
        self.starts = 0

    def start(self, wait: float = 20.0, args: tuple[str, ...] = ()) -> "DaemonProcess":
        """`args`: more options for `mccs daemon`, e.g. ("--new-checkpoint",)."""
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([*self.program, "daemon", "-c", str(self.config), *args],
                                     stdout=log, stderr=log, env=self.env, start_new_session=True)
        log.close()
        self.starts += 1
        if wait:
            self.wait_ready(wait)
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.cfg.id} exited with {self.proc.returncode}: {self.log_tail()}")
            if socket_answers(self.cfg.socket):
                return
            time.sleep(0.02)
        raise TimeoutError(f"daemon {self.cfg.id} did not answer within {timeout} s: {self.log_tail()}")

    def counters(self) -> dict:
        """The daemon's counters as `mccs status` shows them (passes, commits, ...)."""
        import mccs
        with mccs.connect(self.config, None) as c:
            return c.status()["counters"]

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        """The daemon's process id (once started)."""
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def kill(self) -> None:
        """kill -9: a crash, nothing flushed, nothing signed off."""
        if self.running:
            assert self.proc is not None  # running
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM: lines sign off, the daemon exits 0."""
        self.terminate()
        return self.wait_exit(timeout)

    def terminate(self) -> None:
        """SIGTERM, not waiting for the exit (stop_all)."""
        if self.running:
            assert self.proc is not None  # running
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float = 15.0) -> int | None:
        """The exit status, after kill -9 if it takes longer than `timeout`."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def restart(self, wait: float = 20.0) -> None:
        self.kill()
        self.start(wait)

    def __enter__(self) -> "DaemonProcess":
        return self.start() if not self.running else self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_all(daemons: Iterable[DaemonProcess], wait: float = 60.0) -> None:
    """Start every daemon, then wait until each answers: their start-ups overlap (a ring of 40
    comes up in a third of the time one after another takes)."""
    daemons = list(daemons)
    for d in daemons:
        d.start(wait=0)
    for d in daemons:
        d.wait_ready(wait)


def stop_all(daemons: Iterable[DaemonProcess], timeout: float = 15.0) -> None:
    """Stop every daemon, their sign-offs overlapping."""
    daemons = list(daemons)
    for d in daemons:
        d.terminate()
    for d in daemons:
        d.wait_exit(timeout)


def wait_until(predicate, seconds: float, what: str):
    """Poll `predicate` every 100 ms until it returns something true (returned), or raise
    AssertionError naming `what` after `seconds`: for tests that watch a daemon. (A poll of a
    daemon's status costs about 1.4 ms of CPU, its and ours: the test suite polls a lot.)"""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def give_keys(configs: Sequence[str | os.PathLike]) -> None:
    """End-to-end keys for these hosts (docs/E2E.md), each trusting all the others: what `mccs keys
    init`, `show` and `trust` do, in this process (for loopback runs and benchmarks)."""
    from mccs.config import load
    from mccs.daemon import keys
    cfgs = [load(c) for c in configs]
    private = {cfg.id: keys.new_private() for cfg in cfgs}
    for cfg in cfgs:
        keys.write_own(cfg.host_key, [keys.Entry("", private[cfg.id])])
        # every host's key, its own too: hosts whose configs share a directory share the trust file
        keys.write_trusted(cfg.known_hosts, [keys.Entry(h, keys.public_of(key)) for h, key in private.items()])
