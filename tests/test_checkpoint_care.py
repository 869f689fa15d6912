"""`mccs checkpoint backup` and `check` (issue 13) on real daemons, real SQLite files."""
from __future__ import annotations

import shutil
import sqlite3
import threading
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(180)

BAUD = 19200  # slow enough that most messages still wait on AA's SEND_LIST when the backup is taken


def _recv_all(client, seconds: float) -> list:
    """Every message that comes until none has come for `seconds`."""
    got = []
    while (m := client.recv(timeout=seconds)) is not None:
        got.append(m)
    return got


def test_a_backup_taken_during_traffic_restores_into_a_daemon_that_delivers_everything_accepted_before(tmp_path):
    keys = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=BAUD) as vl:
        a = DaemonProcess(write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), **keys}]))
        b = DaemonProcess(write_config(tmp_path, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"), **keys}]))
        try:
            a.start(), b.start()
            accepted: list[tuple[float, bytes]] = []  # (when its SEND returned, data)
            stop = threading.Event()

            def traffic():
                with mccs.connect(a.config, "S") as s:
                    for i in range(1000):
                        if stop.is_set():
                            return
                        data = b"message %04d " % i + bytes(30)
                        s.send("BBR", data)
                        accepted.append((time.monotonic(), data))
                        time.sleep(0.005)
            sender = threading.Thread(target=traffic)
            sender.start()
            while len(accepted) < 150:
                time.sleep(0.01)
            backup_started = time.monotonic()
            run = mccs_cli("checkpoint", "backup", "-c", str(a.config), str(tmp_path / "AA.backup"), timeout=60)
            assert run.returncode == 0, run.stderr
            assert sender.is_alive(), "the backup was taken while messages were being accepted"
            stop.set()
            sender.join(60)
            a.kill()  # the host's disk is lost: its checkpoint is restored from the backup
            before = [d for t, d in accepted if t < backup_started]
            check = mccs_cli("checkpoint", "check", str(tmp_path / "AA.backup"), "--json", timeout=60)
            assert check.returncode == 0, check.stderr
            with mccs.connect(b.config, "R") as r:
                delivered_before_restore = len(_recv_all(r, 0.5))
            assert delivered_before_restore < len(before), "some messages accepted before the backup were " \
                                                           "still waiting at AA when it died"
            for path in tmp_path.glob("AA.db*"):
                if path.name != "AA.db.lock":
                    path.unlink()
            shutil.copy(tmp_path / "AA.backup", tmp_path / "AA.db")
            a.start()  # a fresh daemon process on the restored checkpoint
            with mccs.connect(b.config, "R") as r:
                after = [m.data for m in _recv_all(r, 3.0)]
            got = [d for _, d in accepted][:delivered_before_restore] + after
            sent = [d for _, d in accepted]
            assert len(set(got)) == len(got), "a message was delivered twice"
            assert got == sent[:len(got)], "delivered in order, nothing that was not sent"
            assert len(got) >= len(before), "everything accepted before the backup was delivered"
        finally:
            a.stop()
            b.stop()


def _corrupt(path) -> None:
    """Damage one page of a table's b-tree in the middle of the file (the header stays readable)."""
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'send_list'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xa5" * 64)


def test_check_tells_a_sound_checkpoint_from_a_damaged_one_and_backup_never_overwrites(tmp_path):
    a = DaemonProcess(write_config(tmp_path, "AA", [{"peer": "BB", "port": "/nonexistent/ttyBB"}]))
    with a:
        with mccs.connect(a.config, "S") as s:
            for i in range(20):
                s.send("BBR", b"queued %d" % i)
        run = mccs_cli("checkpoint", "check", "-c", str(a.config), timeout=60)  # while the daemon runs
        assert run.returncode == 0, run.stderr
        assert "host AA" in run.stdout and "send_list    20" in run.stdout and "integrity_check: ok" in run.stdout
        dest = tmp_path / "AA.backup"
        assert mccs_cli("checkpoint", "backup", "-c", str(a.config), str(dest), timeout=60).returncode == 0
        dest.write_bytes(b"precious")
        again = mccs_cli("checkpoint", "backup", "-c", str(a.config), str(dest), timeout=60)
        assert again.returncode == 2 and "--force" in again.stderr and dest.read_bytes() == b"precious"
        forced = mccs_cli("checkpoint", "backup", "-c", str(a.config), str(dest), "--force", timeout=60)
        assert forced.returncode == 0 and dest.stat().st_mode & 0o777 == 0o600
    assert mccs_cli("checkpoint", "check", str(dest), timeout=60).returncode == 0
    _corrupt(dest)
    bad = mccs_cli("checkpoint", "check", str(dest), timeout=60)
    assert bad.returncode == 1 and "malformed" in bad.stderr and "FAILED" in bad.stdout
    (tmp_path / "junk.db").write_bytes(b"not a database at all, just some bytes" * 200)
    junk = mccs_cli("checkpoint", "check", str(tmp_path / "junk.db"), timeout=60)
    assert junk.returncode == 1 and "not a usable SQLite database" in junk.stderr
    missing = mccs_cli("checkpoint", "check", str(tmp_path / "none.db"), timeout=60)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert mccs_cli("checkpoint", "check", timeout=60).returncode == 2  # no PATH, no config
