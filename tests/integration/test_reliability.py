"""The defects an adversarial test found (issue 9), each reproduced against real daemon processes:
MSG_ID reuse after the wrap, an emptied checkpoint, unbounded clients, a stolen socket, a full
disk, a stopped daemon, malformed requests."""
from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mccs
from mccs.client.ipc import frame
from mccs.testbed.hosts import DaemonProcess, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.procstat import rss
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(120)

BAUD = 115200
OFFLINE_BB = {"peer": "BB", "port": "/nonexistent/ttyBB", "protocol": "async"}
MCCS = [sys.executable, "-m", "mccs.cli"]


@pytest.fixture
def daemons():
    made = []

    def make(*args, **kwargs) -> DaemonProcess:
        made.append(DaemonProcess(*args, **kwargs))
        return made[-1]
    yield make
    for d in made:
        if d.proc is not None and d.running:
            os.kill(d.proc.pid, signal.SIGCONT)
        d.stop()


def _read(sock: socket.socket) -> dict:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    return json.loads(body)


def _rss_kib(pid: int) -> int:
    return rss(pid) // 1024


# -- 1. MSG_ID reuse ---------------------------------------------------------------------------------
def test_msg_ids_still_queued_are_not_given_again_after_the_wrap(tmp_path, daemons):
    """Messages wait for a peer that is down while the MSG_ID counter comes round: the new
    messages get ids that are not in use, and the peer gets every message once, in order."""
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=BAUD) as vl:
        keys = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
        a = daemons(write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), **keys}])).start()
        b = daemons(write_config(tmp_path, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"), **keys}]))
        with mccs.connect(a.config, "S") as s:
            old = [s.send("BBR", b"old %d" % i) for i in range(30)]
        a.stop()
        with sqlite3.connect(a.cfg.checkpoint) as db:  # as if 65,500 messages to others had passed
            db.execute("UPDATE meta SET value = '65530' WHERE key = 'next_msg_id'")
        db.close()
        a.start()
        with mccs.connect(a.config, "S") as s:
            new = [s.send("BBR", b"new %d" % i) for i in range(20)]
        assert old == list(range(1, 31))
        assert new == list(range(65530, 65536)) + list(range(31, 45))  # 1..30 are still queued
        b.start()
        with mccs.connect(b.config, "R") as r:
            got = [r.recv(timeout=30) for _ in range(50)]
            assert [m.data for m in got] == [b"old %d" % i for i in range(30)] + [b"new %d" % i for i in range(20)]
            assert r.recv(timeout=1.0) is None
        with mccs.connect(a.config, None) as admin:
            deadline = time.monotonic() + 20
            while (admin.status()["lists"]["send"] or admin.status()["msg_ids_in_use"]) and time.monotonic() < deadline:
                time.sleep(0.1)  # (an id is in use until BB's state says its message was taken: custody)
            assert admin.status()["lists"]["send"] == 0 and admin.status()["msg_ids_in_use"] == 0


# -- 2. an emptied checkpoint ---------------------------------------------------------------------------
def _daemon_cli(config, *extra, timeout=20) -> subprocess.CompletedProcess:
    return subprocess.run(MCCS + ["daemon", "-c", str(config), *extra], capture_output=True, text=True,
                          timeout=timeout)


def test_an_emptied_or_missing_checkpoint_is_refused_not_started_afresh(tmp_path, daemons):
    d = daemons(write_config(tmp_path, "AA", [OFFLINE_BB])).start()
    with mccs.connect(d.config, "S") as s:
        for i in range(3):
            s.send("BBQ", b"queued")
    d.kill()  # the WAL stays beside the checkpoint
    db = Path(d.cfg.checkpoint)
    wal = Path(f"{db}-wal")
    assert wal.exists() and wal.stat().st_size > 0
    db.write_bytes(b"")
    run = _daemon_cli(d.config)
    assert run.returncode == 2 and "is empty" in run.stderr and "--new-checkpoint" in run.stderr, run.stderr
    assert db.stat().st_size == 0 and wal.stat().st_size > 0  # nothing overwritten
    db.unlink()
    run = _daemon_cli(d.config)
    assert run.returncode == 2 and "is missing" in run.stderr, run.stderr
    started = subprocess.Popen(MCCS + ["daemon", "-c", str(d.config), "--new-checkpoint"], stderr=subprocess.PIPE)
    try:
        with mccs.connect(d.config, None, connect_timeout=20) as admin:
            assert admin.status()["lists"] == {"wait": 0, "send": 0, "recv": 0}
    finally:
        started.send_signal(signal.SIGTERM)
        assert started.wait(20) == 0
    assert list(tmp_path.glob("AA.db-wal.*.old")), "the old WAL is kept aside, not read and not deleted"
    run = _daemon_cli(d.config, "--new-checkpoint")  # a checkpoint with content is never replaced
    assert run.returncode == 2 and "already holds a checkpoint" in run.stderr


def test_a_first_start_creates_the_checkpoint_without_a_flag(tmp_path, daemons):
    d = daemons(write_config(tmp_path, "AA", [])).start()
    with mccs.connect(d.config, "S") as s:
        assert s.send("AAR", b"x") == 1


# -- 3. limits per connection ----------------------------------------------------------------------------
def _pipeline(path: str, requests: list[bytes], seconds: float) -> tuple[socket.socket, int]:
    """Write requests without reading a reply, as far as the daemon takes them in `seconds`."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    sock.setblocking(False)
    data, sent, end = b"".join(requests), 0, time.monotonic() + seconds
    while sent < len(data) and time.monotonic() < end:
        try:
            sent += sock.send(data[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
    return sock, sent


def test_a_client_that_never_reads_cannot_grow_the_daemon_or_slow_others(tmp_path, daemons):
    d = daemons(write_config(tmp_path, "AA", [])).start()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        s.send("AAR", b"warm")
        r.recv(timeout=5)
        before = _rss_kib(d.proc.pid)
        pings = [frame({"op": "ping", "id": i}) for i in range(400_000)]
        hog, sent = _pipeline(d.cfg.socket, pings, 3.0)
        recvs = [frame({"op": "recv", "id": i}) for i in range(200_000)]
        hog2, _ = _pipeline(d.cfg.socket, [frame({"op": "hello", "name": "HOG"})] + recvs, 3.0)
        assert sent < 400_000 * 20 // 2, "the daemon kept reading a client that reads nothing"
        t0 = time.monotonic()
        for i in range(50):  # every other process is served as usual
            s.send("AAR", b"%d" % i)
            assert r.recv(timeout=5).data == b"%d" % i
        assert time.monotonic() - t0 < 20
        assert _rss_kib(d.proc.pid) - before < 40_000
        hog.close()
        hog2.close()


def test_pipelined_sends_cannot_grow_a_durable_wait_list_past_its_bound(tmp_path, daemons):
    d = daemons(write_config(tmp_path, "AA", [OFFLINE_BB], buffers=4)).start()
    sends = [frame({"op": "send", "id": i, "to": "BBQ", "data": "eA==", "req": f"r{i}"}) for i in range(1000)]
    hog, _ = _pipeline(d.cfg.socket, [frame({"op": "hello", "name": "HOG"})] + sends, 2.0)
    time.sleep(0.5)
    with sqlite3.connect(f"file:{d.cfg.checkpoint}?mode=ro", uri=True) as db:
        assert db.execute("SELECT count(*) FROM send_list").fetchone()[0] == 4
        assert db.execute("SELECT count(*) FROM wait_list").fetchone()[0] <= 4
    db.close()
    hog.close()
    d.restart()
    with mccs.connect(d.config, None) as admin:
        assert admin.status()["lists"]["wait"] <= 4


# -- 4. a second daemon on the same socket ----------------------------------------------------------------
def test_a_second_daemon_cannot_take_a_live_socket(tmp_path, daemons):
    first = daemons(write_config(tmp_path, "AA", [])).start()
    other = write_config(tmp_path / "other", "AA", [], socket=first.cfg.socket)
    run = _daemon_cli(other)
    assert run.returncode == 2 and "another MCCS daemon serves" in run.stderr, run.stderr
    with mccs.connect(first.config, "S") as s:  # the first one still answers on its socket
        assert s.send("AAR", b"still here") >= 1


# -- 5. a full disk -------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmpfs):
    return tmpfs("4m")


def _fill(directory: Path, leave: int) -> Path:
    """A file that leaves about `leave` bytes free on the file system of `directory`."""
    st = os.statvfs(directory)
    filler = directory / "filler"
    with open(filler, "ab") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


@pytest.mark.parametrize("reserve", [512 * 1024, 0])
def test_disk_full_refuses_new_messages_and_recovers_by_itself(tmp_path, small_disk, daemons, reserve):
    """With a reserve the daemon stops taking messages before the disk is full; with none, SQLite
    meets the full disk: the pass is rolled back and the core restored from the checkpoint."""
    d = daemons(write_config(tmp_path, "AA", [], checkpoint=str(small_disk / "AA.db"), disk_reserve=reserve)).start()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"stored before")
    filler = _fill(small_disk, 64 * 1024 if reserve else 0)
    refused = None
    for _ in range(200):
        run = subprocess.run(MCCS + ["send", "-c", str(d.config), "--as", "S", "AAR", "x" * 100],
                             capture_output=True, text=True, timeout=60)
        if run.returncode == 4:
            refused = run
            break
        assert run.returncode == 0, run.stderr
    assert refused is not None and "disk" in refused.stderr, "SENDs never refused on a full disk"
    assert d.running
    with mccs.connect(d.config, "R") as r:
        assert r.recv(timeout=10).data == b"stored before"  # deliveries go on
    filler.unlink()
    deadline = time.monotonic() + 20
    while True:
        run = subprocess.run(MCCS + ["send", "-c", str(d.config), "--as", "S", "AAR", "after"],
                             capture_output=True, text=True, timeout=60)
        if run.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert run.returncode == 0, run.stderr
    assert d.running


# -- 6. a stopped daemon ---------------------------------------------------------------------------------------
def test_no_client_call_hangs_on_a_stopped_daemon(tmp_path, daemons):
    d = daemons(write_config(tmp_path, "AA", [])).start()
    os.kill(d.proc.pid, signal.SIGSTOP)
    cfg = str(d.config)
    calls = [["status", "-c", cfg], ["recv", "-c", cfg, "--as", "R", "--nowait"],
             ["recv", "-c", cfg, "--as", "R", "--timeout", "2"], ["send", "-c", cfg, "--as", "S", "AAR", "x"]]
    t0 = time.monotonic()
    procs = [subprocess.Popen(MCCS + c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in calls]
    codes = [p.wait(timeout=60) for p in procs]
    assert codes == [3, 3, 3, 3], [p.stderr.read() for p in procs]
    assert time.monotonic() - t0 < 40
    os.kill(d.proc.pid, signal.SIGCONT)


# -- 7. malformed requests ---------------------------------------------------------------------------------------
def test_malformed_requests_get_error_replies_and_the_connection_lives(tmp_path, daemons):
    d = daemons(write_config(tmp_path, "AA", [])).start()
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(d.cfg.socket)
    deep = b'{"op": "ping", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"  # within the size limit
    bad = [frame({"op": [1]}), frame({"op": {"a": 1}}), struct.pack(">I", len(deep)) + deep,
           frame({"op": "hello", "name": "R"}), frame({"op": "recv", "user_id": True}),
           frame({"op": "recv", "wait": "false"}), frame({"op": "send", "to": "AAR", "data": "eA==", "user_id": 1.5})]
    for b in bad:
        raw.sendall(b)
    replies = [_read(raw) for _ in bad]
    assert [r["ok"] for r in replies] == [False, False, False, True, False, False, False], replies
    assert "nested too deeply" in replies[2]["error"] and "boolean" in replies[4]["error"]
    raw.sendall(frame({"op": "ping", "id": 7}))
    assert _read(raw) == {"id": 7, "ok": True, "host": "AA"}


def test_a_missing_socket_group_is_a_clear_config_error(tmp_path):
    config = write_config(tmp_path, "AA", [], socket_group="no-such-group-here")
    run = _daemon_cli(config)
    assert run.returncode == 2 and "socket_group" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "run" / "AA.sock").exists()
