"""Service conventions (issue 13): every long-running command stops cleanly on SIGTERM and on
Ctrl-C (SIGINT) with exit 0, the daemon tells systemd it is ready (sd_notify) once its socket
listens, and `mccs daemon --check` says whether a host would start, without starting it. Real
processes, real sockets, real pseudo-terminals."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import mccs
from mccs.daemon import service
from mccs.testbed.hosts import DaemonProcess, mccs_cli, socket_answers, wait_until, write_config
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(120)

MCCS = [sys.executable, "-m", "mccs.cli"]
OFFLINE = {"peer": "BB", "port": "/nonexistent/ttyBB"}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


# -- the daemon: SIGTERM and SIGINT, readiness --------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_daemon_says_ready_once_its_socket_listens_and_stops_on_the_signal_with_exit_0(tmp_path, sig):
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(20)
    config = write_config(tmp_path, "AA", [OFFLINE])
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "JOURNAL_STREAM": "8:12345"}
    proc = subprocess.Popen([*MCCS, "daemon", "-c", str(config)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        ready = notify.recv(4096).decode()
        assert ready.startswith("READY=1\n") and f"MAINPID={proc.pid}" in ready
        assert socket_answers(str(tmp_path / "run" / "AA.sock")), "READY=1 only once the socket listens"
        with mccs.connect(config, "S") as s:
            s.send("BBR", b"kept across the stop")
        proc.send_signal(sig)
        assert notify.recv(4096) == b"STOPPING=1"
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.wait()
        notify.close()
    log = proc.stderr.read()  # to stderr; under systemd with the priority the journal reads, no own time
    assert "<6>mccs.daemon.shell INFO AA: stopping" in log.splitlines(), log
    with DaemonProcess(config) as d, mccs.connect(d.config, None) as admin:
        assert admin.status()["lists"]["send"] == 1


def test_notify_reaches_an_abstract_socket_and_is_silent_without_one(monkeypatch):
    name = f"mccs-test-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(5)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert service.notify("READY=1") and s.recv(100) == b"READY=1"
        monkeypatch.setenv("NOTIFY_SOCKET", "/nonexistent/notify")
        assert service.notify("READY=1") is False  # logged, never raised
        monkeypatch.delenv("NOTIFY_SOCKET")
        assert service.notify("READY=1") is False
    finally:
        s.close()


# -- vserial and loopback ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_vserial_stops_on_the_signal_with_exit_0_and_takes_its_ports_away(tmp_path, sig):
    proc = subprocess.Popen([*MCCS, "vserial", "--dir", str(tmp_path), "AA-BB"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("AA-BB: ")  # the lines are up
        assert os.path.exists(tmp_path / "AA.BB") and os.path.exists(tmp_path / "BB.AA")
        proc.send_signal(sig)
        assert proc.wait(20) == 0, proc.stderr.read()
        assert "AA-BB: {" in proc.stdout.read()  # its counters, printed on the way out
    finally:
        proc.kill()
        proc.wait()
    assert not os.path.exists(tmp_path / "AA.BB") and not os.path.exists(tmp_path / "BB.AA")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_loopback_stops_on_the_signal_with_exit_0_and_stops_every_daemon_it_started(tmp_path, sig):
    proc = subprocess.Popen([*MCCS, "loopback", "--hosts", "2", "--messages", "100000", "--baud", "9600",
                             "--dir", str(tmp_path), "--timeout", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        sockets = [tmp_path / "run" / f"{h}.sock" for h in ("AA", "BB")]
        wait_until(lambda: all(socket_answers(str(p)) for p in sockets), 60, "loopback's daemons answer")
        for path in sockets:
            with mccs.connect(str(path), None) as admin:
                pids.append(admin.status()["pid"])
        wait_until(lambda: "loopback: 2 hosts" in proc.stderr.readline(), 30, "the traffic starts")
        proc.send_signal(sig)
        assert proc.wait(60) == 0, proc.stderr.read()
        # its last words, read up to that line and not to the pipe's end: a traffic process being
        # started as the signal came may be left running, holding stderr open for a minute or two
        assert any("interrupted" in line for line in iter(proc.stderr.readline, ""))
        assert all(_gone(pid) for pid in pids), "every daemon it started is stopped"
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:  # left behind only if the test failed
            if not _gone(pid):
                os.kill(pid, signal.SIGTERM)
    assert not any(socket_answers(str(p)) for p in sockets)


# -- mccs daemon --check ------------------------------------------------------------------------------------
def test_daemon_check_validates_the_config_and_its_ports_without_starting(tmp_path):
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=9600) as vl:
        good = write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB")}])
        run = mccs_cli("daemon", "-c", str(good), "--check", timeout=60)
        assert run.returncode == 0, run.stderr
        assert f"ok    port {vl.port('AA', 'BB')} (line to BB): opened" in run.stdout
        assert "checkpoint" in run.stdout and "created at the first start" in run.stdout
        assert not (tmp_path / "AA.db").exists() and not socket_answers(str(tmp_path / "run" / "AA.sock"))

        with DaemonProcess(good):  # a running daemon holds its port: reported, not disturbed
            run = mccs_cli("daemon", "-c", str(good), "--check", timeout=60)
            assert run.returncode == 0, run.stderr
            assert "in use" in run.stdout and "a daemon answers on it now" in run.stdout
            assert "quick_check ok" in run.stdout

        bad_port = write_config(tmp_path / "b", "AA", [{"peer": "BB", "port": str(tmp_path / "ttyNone")}])
        run = mccs_cli("daemon", "-c", str(bad_port), "--check", timeout=60)
        assert run.returncode == 2 and "No such file or directory" in run.stderr and "1 problem(s)" in run.stdout
        (tmp_path / "plain").write_text("not a device")
        not_a_tty = write_config(tmp_path / "c", "AA", [{"peer": "BB", "port": str(tmp_path / "plain")}])
        run = mccs_cli("daemon", "-c", str(not_a_tty), "--check", timeout=60)
        assert run.returncode == 2 and "not a character device" in run.stderr

    bad_key = write_config(tmp_path / "d", "AA", [{"peer": "BB", "port": "/dev/null", "baud_rate": 9600}])
    run = mccs_cli("daemon", "-c", str(bad_key), "--check", timeout=60)
    assert run.returncode == 2 and "baud_rate" in run.stderr
