"""`mccs queue` and `mccs status --watch` against real daemon processes over a real
pseudo-terminal line (vserial), run as a user runs them: `mccs` in a child process."""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

BAUD = 115200


@contextlib.contextmanager
def _pair(tmp_path, **host_keys):
    """Hosts AA and BB joined by one vserial line, both running; stopped at the end."""
    vl = Lines(str(tmp_path / "dev"), ["AA-BB"], baud=BAUD).__enter__()
    keys = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
    a = DaemonProcess(write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), **keys}], **host_keys))
    b = DaemonProcess(write_config(tmp_path, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"), **keys}], **host_keys))
    try:
        yield a.start(), b.start()
    finally:
        a.stop()
        b.stop()
        vl.close()


@pytest.fixture
def pair(tmp_path):
    with _pair(tmp_path) as daemons:
        yield daemons


def _queue(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess:
    return mccs_cli("queue", *args, "-c", str(daemon.config), timeout=30)


def _entries(daemon: DaemonProcess) -> dict[str, dict]:
    done = _queue(daemon, "list", "--json")
    assert done.returncode == 0, done.stderr
    return {e["id"]: e for e in json.loads(done.stdout)["entries"]}


def _line(daemon: DaemonProcess, state: str, timeout: float = 20.0) -> None:
    with mccs.connect(daemon.config, None) as c:
        deadline = time.monotonic() + timeout
        while c.status()["lines"][0]["state"] != state:
            assert time.monotonic() < deadline, f"the line of {daemon.cfg.id} is not {state}"
            time.sleep(0.05)


@pytest.mark.timeout(150)
def test_queue_on_a_running_and_a_stopped_daemon_hold_release_and_purge_change_what_arrives(pair):
    a, b = pair
    b.stop()  # what AA sends waits on its SEND_LIST
    _line(a, "DOWN")
    with mccs.connect(a.config, "P") as p:
        first, held, purged = (p.send("BBR", text) for text in (b"first", b"held", b"purged"))
        listed = _queue(a, "list")
        assert listed.returncode == 0 and f"AA/{held}" in listed.stdout and "SEND_LIST" in listed.stdout
        assert _entries(a)[f"AA/{held}"]["state"] == "waiting"

        done = _queue(a, "hold", f"AA/{held}")
        assert done.returncode == 0 and "held" in done.stdout, done.stderr
        done = _queue(a, "purge", str(purged))  # a bare MSG_ID: this host's own
        assert done.returncode == 0 and f"AA/{purged}: purged" in done.stdout, done.stderr
        notice = p.recv(from_id="AAMCCS", user_id=purged, timeout=10)
        about = json.loads(notice.data)
        assert about["notice"] == "undeliverable" and about["msg_id"] == purged
        assert about["reason"] == "purged"

        for args, words in ((("show", "AA/9999"), "no message AA/9999"), (("show", "A-12"), "is not ORIGIN/MSG_ID"),
                            (("purge", "--older-than", "5 parsecs"), "is not a duration"),
                            (("purge",), "purge takes one ID"), (("hold", "#99999"), "no message #99999"),
                            (("release", "AA/0"), "1 to 65535")):
            done = _queue(a, *args)
            assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
        with mccs.connect(a.config, None) as admin:  # straight on the socket, past the command's checks
            for keys in ({"msg": "zz"}, {"msg": 7.5}, {"older_than": "soon"}, {"to": "B B C"}, {"limit": True}):
                with pytest.raises(mccs.client.Refused) as refused:
                    admin.queue("purge", **keys)
                assert refused.value.code in ("bad_id", "bad_request"), keys
        assert a.running and p.ping().rtt < 5  # bad requests never hurt the daemon

    a.restart()  # kill -9 and a start: the hold is in the checkpoint
    assert _entries(a)[f"AA/{held}"]["state"] == "held"
    a.stop()
    listed = _queue(a, "list")  # the daemon is down: read from the checkpoint, and said so
    assert listed.returncode == 0 and "read from the checkpoint" in listed.stdout
    assert f"AA/{held}" in listed.stdout and "held" in listed.stdout and f"AA/{purged}" not in listed.stdout
    shown = _queue(a, "show", f"AA/{held}", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["entry"]["preview"] == "held"
    assert json.loads(shown.stdout)["source"].startswith("checkpoint")
    done = _queue(a, "release", f"AA/{held}")
    assert done.returncode == 3 and "goes through the running daemon" in done.stderr
    assert _queue(a, "show", "AA/9999").returncode == 2

    a.start()
    b.start()
    with mccs.connect(b.config, "R") as r:
        got = r.recv(timeout=30)
        assert (got.msg_id, got.data) == (first, b"first")
        assert r.recv(timeout=3) is None  # the held one waits, the purged one is gone
        assert _queue(a, "release", f"AA/{held}").returncode == 0
        got = r.recv(timeout=30)
        assert (got.msg_id, got.data) == (held, b"held")
        assert r.recv(timeout=2) is None
    assert _entries(a) == {}


def _watch(daemon: DaemonProcess, *args: str, frames: int = 2, mark: bytes = b"host AA", tty: bool = False):
    """`mccs status --watch` on a pipe (or a pseudo-terminal) until it has shown `frames` frames (each
    says `mark`), however long it takes to start, then Ctrl-C. Returns its exit status, its
    output and stderr, and the seconds between its first two frames."""
    main, side = os.openpty() if tty else os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "mccs.cli", "status", "--watch", "-c", str(daemon.config), *args],
                            stdout=side, stderr=subprocess.PIPE)
    os.close(side)
    out, came, stopped, deadline = b"", [], False, time.monotonic() + 30  # came: when each frame did
    try:
        while True:
            assert time.monotonic() < deadline, f"not {frames} frames of {mark!r} in 30 s, or no end: {out!r}"
            if not select.select([main], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # a pseudo-terminal whose other side is closed and drained
                chunk = b""
            if not chunk:
                break
            out += chunk
            came += [time.monotonic()] * (out.count(mark) - len(came))
            if len(came) >= frames and not stopped:
                proc.send_signal(signal.SIGINT)  # Ctrl-C
                stopped, deadline = True, time.monotonic() + 15
    except BaseException:
        proc.kill()
        raise
    finally:
        os.close(main)
    return proc.wait(15), out.decode(errors="replace"), proc.stderr.read().decode(), came[1] - came[0]


@pytest.mark.timeout(90)
def test_status_watch_refreshes_every_second_and_ctrl_c_ends_it(pair):
    a, b = pair
    _line(a, "UP")
    with mccs.connect(a.config, "P") as p:
        p.send("BBR", b"x" * 100)
    code, out, err, gap = _watch(a)
    assert code == 0, err
    assert gap < 3  # a frame a second
    frames = [f for f in out.split("\n\n\n") if f.strip()]  # not a terminal: frames a blank line apart
    assert len(frames) >= 2 and all("host AA" in f and "RETX/MIN" in f for f in frames), out
    assert "\033[" not in out
    row = next(r for r in frames[1].splitlines() if r.startswith("BB "))
    assert row.split()[2] == "UP" and row.split()[3].isdigit() and row.split()[4].isdigit()  # rates in the 2nd

    code, out, err, gap = _watch(a, "--json", mark=b'"lines"')
    frames = [json.loads(f) for f in out.splitlines()]
    assert code == 0 and len(frames) >= 2, err
    assert frames[0]["lines"][0]["rate_in"] is None and frames[1]["lines"][0]["rate_in"] >= 0
    assert frames[1]["lines"][0]["retransmissions_last_minute"] >= 0 and "oldest_waiting" in frames[1]

    a.stop()  # a daemon that stops is waited for, a frame a second
    code, out, err, gap = _watch(a, mark=b"the daemon does not answer")
    assert code == 0 and out.count("the daemon does not answer") >= 2 and gap < 3, (out, err)


@pytest.mark.timeout(60)
def test_status_watch_on_a_terminal_clears_the_screen_for_each_frame(pair):
    a, b = pair
    code, out, err, gap = _watch(a, tty=True)
    assert code == 0, err
    assert out.count("\033[H\033[2J") >= 2 and out.count("host AA") >= 2


@pytest.mark.timeout(150)
def test_purging_a_large_message_in_transfer_corrupts_nothing(tmp_path):
    with _pair(tmp_path, max_message=4 << 20) as (a, b):
        _line(a, "UP")
        with mccs.connect(a.config, "P") as p, mccs.connect(b.config, "R") as r:
            msg_id = p.send("BBR", os.urandom(1 << 20))
            deadline = time.monotonic() + 30
            while not ((t := p.status()["lines"][0]["transfer"]) and t["bytes"] > 50_000):
                assert time.monotonic() < deadline, "the transfer did not start"
                time.sleep(0.1)
            done = _queue(a, "purge", f"AA/{msg_id}")
            assert done.returncode == 0 and f"AA/{msg_id}: purg" in done.stdout, done.stderr
            # it had left with its number: its void goes on, and BB, where it never came whole, tells
            about = json.loads(p.recv(from_id="BBMCCS", user_id=msg_id, timeout=20).data)
            assert (about["notice"], about["reason"]) == ("undeliverable", "purged")
            assert p.recv(from_id="", wait=False) is None  # one notice; carries its confirm
            assert _entries(a) == {}
            after = p.send("BBR", b"next")  # the line goes on
            got = r.recv(timeout=30)
            assert (got.msg_id, got.data) == (after, b"next")  # the purged one never arrives
            assert r.recv(timeout=2) is None
        a.stop()
        b.stop()
        for daemon in (a, b):
            conn = sqlite3.connect(daemon.cfg.checkpoint)
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("SELECT count(*) FROM send_list WHERE flags & 256 = 0").fetchone()[0] == 0  # (but
            # custody's copy of "next", until BB's state says it was taken: mccs.core.custody)
            conn.close()
        a.start()  # both come back and carry on
        b.start()
        with mccs.connect(a.config, "P") as p, mccs.connect(b.config, "R") as r:
            again = p.send("BBR", b"after the restart")
            assert r.recv(timeout=30).msg_id == again
