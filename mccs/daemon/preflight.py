"""`mccs daemon --check`: would this host's daemon start, and reach its lines? Checked without
starting it: the config (every key, secret files), the socket, the checkpoint, the trace
directory, the end-to-end key and trust files, and each line's port. A port is opened briefly
with its settings and an exclusive lock, so a port a running daemon holds is reported in use and
left alone."""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import serial

from checkpoint.store import CheckpointError, check
from linedrivers.port import open_port

from mccs.config import HostConfig, LineConfig
from mccs.daemon.keys import KeyFileError, keyring
from mccs.daemon.server import answers


@dataclass
class Finding:
    ok: bool
    what: str  # the thing checked, e.g. "port /dev/ttyUSB0 (line to BB)"
    detail: str


def _writable_dir(path: Path) -> str | None:
    """Why the daemon could not create files in `path` (made if missing), or None."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def _socket(cfg: HostConfig) -> Finding:
    path = Path(cfg.socket)
    why = _writable_dir(path.parent)
    if why:
        return Finding(False, f"socket {path}", why)
    if answers(path):
        return Finding(True, f"socket {path}", "a daemon answers on it now (a second one would be refused)")
    return Finding(True, f"socket {path}", "free")


def _checkpoint(cfg: HostConfig) -> Finding:
    path = Path(cfg.checkpoint)
    what = f"checkpoint {path}"
    if not path.exists() or path.stat().st_size == 0:
        if Path(f"{path}.lock").exists():
            return Finding(False, what, "missing or empty, but a daemon used it before: the daemon would refuse "
                                        "it; restore a backup, or start empty with --new-checkpoint")
        why = _writable_dir(path.parent)
        return Finding(why is None, what, why or "none yet: created at the first start")
    try:
        report = check(path, quick=True)
    except CheckpointError as e:
        return Finding(False, what, str(e))
    if report.get("host") not in (None, cfg.id):
        report["problems"].append(f"belongs to host {report['host']!r}, not {cfg.id!r}")
    if report["problems"]:
        return Finding(False, what, "; ".join(report["problems"]))
    counts = report["counts"]
    return Finding(True, what, f"quick_check ok, schema {report['schema_version']}, epoch {report['epoch']}, "
                               f"SEND_LIST {counts.get('send_list')}, RECV_LIST {counts.get('recv_list')}")


def _port(lc: LineConfig) -> Finding:
    what = f"port {lc.port} (line to {lc.peer})"
    if "://" not in lc.port:
        try:
            mode = os.stat(lc.port).st_mode
        except OSError as e:
            return Finding(False, what, f"{e.strerror} (the daemon would start and retry opening it)")
        if not stat.S_ISCHR(mode):
            return Finding(False, what, "not a character device (a serial port or a pty)")
        if not os.access(lc.port, os.R_OK | os.W_OK):
            return Finding(False, what, "not readable and writable by this user (add it to the port's group, "
                                        "often dialout)")
    try:
        open_port(lc.port, lc.port_settings()).close()
    except (serial.SerialException, OSError, ValueError) as e:
        if "lock" in str(e).lower():
            return Finding(True, what, "in use: another program (the running daemon?) holds it")
        return Finding(False, what, f"cannot open: {e}")
    return Finding(True, what, f"opened and closed at {lc.baud} baud {lc.bytesize}{lc.parity}{lc.stopbits:g}")


def _keys(cfg: HostConfig) -> Finding:
    """The key file and the trust file, as the daemon reads them at its start (docs/E2E.md)."""
    try:
        ring = keyring(cfg, time.time())
    except KeyFileError as e:
        return Finding(False, "end-to-end keys", str(e))
    trusted = ", ".join(sorted(ring.trusted)) or "none"
    return Finding(True, "end-to-end keys", f"e2e {cfg.e2e}, accept {cfg.accept}, {len(ring.own)} key(s) of its own, "
                                            f"trusts {trusted}")


def run_checks(cfg: HostConfig) -> list[Finding]:
    """Every check; the config itself was loaded (and so checked) by the caller."""
    trace = _writable_dir(Path(cfg.trace_dir))
    return [Finding(True, f"config {cfg.path}", f"host {cfg.id}, {len(cfg.lines)} line(s)"),
            _socket(cfg), _checkpoint(cfg), Finding(trace is None, f"trace_dir {cfg.trace_dir}", trace or "writable"),
            _keys(cfg), *(_port(lc) for lc in cfg.lines)]
