"""Services with real daemon processes over a vserial line (pseudo-terminals): several handlers
of a name, observers across a daemon restart, request and reply, dispositions and programs
started on demand, each with its failure path."""
from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import mccs
from mccs.testbed.hosts import mccs_cli, wait_until

pytestmark = pytest.mark.timeout(90)


HOLDER = textwrap.dedent("""
    # A handler that takes a message and dies before its confirm: RECV over the raw socket, no confirm.
    import json, socket, struct, sys, time
    from mccs.client.ipc import frame, LENGTH
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    buf = b""
    def reply():
        global buf
        while True:
            if len(buf) >= LENGTH.size:
                (n,) = LENGTH.unpack_from(buf)
                if len(buf) >= LENGTH.size + n:
                    body, buf = json.loads(buf[LENGTH.size:LENGTH.size + n]), buf[LENGTH.size + n:]
                    return body
            buf += s.recv(65536)
    s.sendall(frame({"op": "hello", "name": "SVC", "id": 1}))
    assert reply()["ok"]
    s.sendall(frame({"op": "recv", "id": 2}))
    print(json.dumps(reply()["msg"]), flush=True)
    time.sleep(60)
""")


def test_a_handler_killed_between_recv_and_confirm_leaves_its_message_to_the_other_once(daemon_pair, tmp_path):
    vl, a, b = daemon_pair()
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), a.cfg.socket], stdout=subprocess.PIPE, text=True)
    try:
        with mccs.connect(b.config, "S") as s, mccs.connect(a.config, "SVC") as other:
            msg_id = s.send("AASVC", b"job 1")
            held = json.loads(holder.stdout.readline())  # came over the line; the holder has it, unconfirmed
            assert held["msg_id"] == msg_id
            assert other.recv(timeout=1.0) is None  # handed to the holder: not to a second handler
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            got = other.recv(timeout=10)
            assert (got.data, got.msg_id, got.from_id) == (b"job 1", msg_id, "BBS   ")
            s.send("AASVC", b"job 2")
            assert other.recv(timeout=10).data == b"job 2"
            assert other.recv(timeout=1.0) is None  # job 1 is not handed a second time
            status = other.status()
            assert status["counters"]["delivered"] == 2 and status["lists"]["recv"] == 0
    finally:
        holder.kill()
        holder.wait()


def test_two_handlers_share_the_messages_of_one_name(daemon_pair):
    vl, a, b = daemon_pair()
    got: dict[str, list[bytes]] = {"h1": [], "h2": []}
    with mccs.connect(b.config, "S") as s, mccs.connect(a.config, "SVC") as h1, mccs.connect(a.config, "SVC") as h2:
        for i in range(10):
            s.send("AASVC", b"%d" % i)
        for _ in range(5):  # each asks in turn: the first that asks takes the next message
            got["h1"].append(h1.recv(timeout=10).data)
            got["h2"].append(h2.recv(timeout=10).data)
        assert h1.recv(wait=False) is None and h2.recv(wait=False) is None
    assert sorted(got["h1"] + got["h2"], key=int) == [b"%d" % i for i in range(10)]
    assert got["h1"] and got["h2"]


def test_an_observer_gets_each_copy_once_across_a_daemon_restart(daemon_pair):
    vl, a, b = daemon_pair()
    with mccs.connect(b.config, "S") as s, mccs.connect(a.config, "SVC", observe=True) as obs, \
            mccs.connect(a.config, "MON") as mon:
        mon.observe("SVC")
        for i in range(3):
            s.send("AASVC", b"before %d" % i)
        assert [obs.recv(timeout=10).data for _ in range(3)] == [b"before %d" % i for i in range(3)]
        assert [mon.recv(timeout=10).data for _ in range(3)] == [b"before %d" % i for i in range(3)]
        a.restart()  # kill -9: the three wait on RECV_LIST, no handler took them
        obs.ping()
        mon.ping()  # both reconnected: observing again
        for i in range(2):
            s.send("AASVC", b"after %d" % i)
        for c in (obs, mon):
            copies = [c.recv(timeout=10) for _ in range(2)]
            assert [m.data for m in copies] == [b"after 0", b"after 1"] and all(m.copy for m in copies)
            assert c.recv(timeout=1.0) is None  # no copy of the restored three, none twice
        with mccs.connect(a.config, "SVC") as handler:  # the handler gets all five itself
            assert [handler.recv(timeout=10).data for _ in range(5)] == \
                [b"before 0", b"before 1", b"before 2", b"after 0", b"after 1"]
        assert obs.recv(timeout=0.5) is None


REPLIER = textwrap.dedent("""
    # The service: answers each request; the one that says "slow" is answered after its timeout.
    import sys, time, mccs
    with mccs.connect(sys.argv[1], "SVC") as c:
        print("ready", flush=True)
        while True:
            m = c.recv()
            if m.data == b"slow":
                time.sleep(float(sys.argv[2]))
                print("late reply sent" if c.reply(m, b"too late") else "late reply not sent", flush=True)
                c._send(m.from_id, b"too late, forced", m.msg_id, None, None, reply=True, ttl=60.0)
                print("forced", flush=True)
            else:
                c.reply(m, b"done: " + m.data, ok=not m.data.startswith(b"bad"))
""")


def test_request_and_reply_across_the_line_and_a_late_reply_dropped(daemon_pair, tmp_path):
    vl, a, b = daemon_pair()
    script = tmp_path / "replier.py"
    script.write_text(REPLIER)
    svc = subprocess.Popen([sys.executable, str(script), str(b.config), "2.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert svc.stdout.readline().strip() == "ready"
        with mccs.connect(a.config, "REQ") as c:
            answer = c.request("BBSVC", b"print", timeout=20)
            assert (answer.data, answer.ok, answer.reply, answer.from_id) == (b"done: print", True, True, "BBSVC ")
            failed = c.request("BBSVC", b"bad page", timeout=20)
            assert (failed.data, failed.ok) == (b"done: bad page", False)
            t0 = time.monotonic()
            assert c.request("BBSVC", b"slow", timeout=1.5) is None
            assert 1.4 < time.monotonic() - t0 < 4.0
            assert svc.stdout.readline().strip() == "late reply not sent"  # the library knew it was too late
            assert svc.stdout.readline().strip() == "forced"  # a replier that sends anyway: dropped at AA
            wait_until(lambda: c.status()["counters"].get("expired", 0) >= 1, 20, "a late reply expired")
            answer = c.request("BBSVC", b"next", timeout=20)  # its own reply, not the late one
            assert answer.data == b"done: next"
            assert c.recv(timeout=0.5) is None and c.status()["lists"]["recv"] == 0
        cli = mccs_cli("request", "-c", str(a.config), "--as", "REQ", "BBSVC", "from the shell", "--timeout", "20",
                       "--json", timeout=30)
        assert cli.returncode == 0 and json.loads(cli.stdout)["text"] == "done: from the shell"
        cli = mccs_cli("request", "-c", str(a.config), "--as", "REQ", "BBSVC", "bad input", "--timeout", "20",
                       timeout=30)
        assert (cli.returncode, cli.stdout) == (5, "done: bad input")
        cli = mccs_cli("request", "-c", str(a.config), "--as", "REQ", "BBNONE", "x", "--timeout", "1", timeout=30)
        assert cli.returncode == 1 and "no reply within 1 s" in cli.stderr
    finally:
        svc.kill()
        svc.wait()
    traces = "".join(p.read_text() for p in (tmp_path / "trace" / "AA").glob("*.jsonl"))
    assert '"reason":"late reply"' in traces


def test_a_reply_from_the_shell(daemon_pair):
    vl, a, b = daemon_pair()
    with mccs.connect(a.config, "REQ") as c:
        msg_id = c.send("BBSH", b"what time is it", ttl=30.0)
        got = mccs_cli("recv", "-c", str(b.config), "--as", "SH", "--json", "--timeout", "20", timeout=30)
        request = json.loads(got.stdout)
        assert request["msg_id"] == msg_id and 20 < request["ttl"] <= 30
        sent = mccs_cli("reply", "-c", str(b.config), "--as", "SH", "--to", request["from_id"], "--msg-id",
                        str(request["msg_id"]), "--ttl", str(request["ttl"]), "--fail", "no clock here", timeout=30)
        assert sent.returncode == 0, sent.stderr
        answer = c.recv(timeout=20, reply_to=msg_id)
        assert (answer.data, answer.ok) == (b"no clock here", False)
        too_late = mccs_cli("reply", "-c", str(b.config), "--as", "SH", "--to", "AAREQ", "--msg-id", "9", "--ttl", "0",
                            "x", timeout=30)
        assert too_late.returncode == 1


def test_discard_returns_messages_while_no_handler_is_attached(daemon_pair):
    vl, a, b = daemon_pair(processes=[{"name": "DROP", "disposition": "discard"}])
    with mccs.connect(b.config, "S") as s:
        msg_id = s.send("AADROP", b"nobody there")
        notice = s.recv(timeout=20)
        body = json.loads(notice.data)
        assert notice.from_id == "AAMCCS" and (body["notice"], body["msg_id"]) == ("undeliverable", msg_id)
        assert body["reason"] == "discarded"
        with mccs.connect(a.config, "DROP") as h:
            s.send("AADROP", b"now there is")
            assert h.recv(timeout=20).data == b"now there is"


PRINT_SERVER = textwrap.dedent("""
    # A print server started on demand: crashes its first two starts, then prints one page and exits.
    import os, pathlib, sys, mccs
    starts = pathlib.Path(sys.argv[1])
    starts.write_text(starts.read_text() + "start\\n" if starts.exists() else "start\\n")
    if len(starts.read_text().split()) <= 2:
        sys.exit(3)
    with mccs.connect(os.environ["MCCS_CONFIG"], os.environ["MCCS_NAME"]) as c:
        page = c.recv(timeout=10)
        with open(sys.argv[2], "ab") as out:
            out.write(page.data + b"\\n")
""")


@pytest.mark.timeout(120)
def test_a_program_started_on_demand_that_crashes_is_started_again_after_a_back_off(daemon_pair, tmp_path):
    script, starts, printed = tmp_path / "print_server.py", tmp_path / "starts", tmp_path / "printed"
    script.write_text(PRINT_SERVER)
    command = " ".join(shlex.quote(str(p)) for p in (sys.executable, script, starts, printed))
    vl, a, b = daemon_pair(processes=[{"name": "PRNT", "start": command, "backoff_max": 4.0}])
    with mccs.connect(b.config, "S") as s, mccs.connect(a.config, None) as admin:
        t0 = time.monotonic()
        s.send("AAPRNT", b"page 1")
        wait_until(lambda: printed.exists() and printed.read_bytes() == b"page 1\n", 30, "the program printed page 1")
        took = time.monotonic() - t0
        assert len(starts.read_text().split()) == 3  # two crashes, then it took the page
        assert took >= 1.0 + 2.0  # back-off: 1 s after the first crash, 2 s after the second
        status = admin.status()
        assert status["counters"]["programs_started"] == 3 and status["counters"]["programs_failed"] == 2
        assert status["lists"]["recv"] == 0  # kept through the crashes, taken once
        s.send("AAPRNT", b"page 2")  # the last start took its page: the next starts at once
        wait_until(lambda: printed.read_bytes() == b"page 1\npage 2\n", 20, "the program printed page 2")
    log = a.log_path.read_text()
    assert "without taking a message (2 time(s) in a row); next start in 2.0 s" in log
    assert "started the program of PRNT" in log


def test_an_observer_from_the_shell(daemon_pair):
    vl, a, b = daemon_pair()
    watcher = subprocess.Popen([sys.executable, "-m", "mccs.cli", "recv", "-c", str(a.config), "--as", "SVC",
                                "--observe", "--json", "--timeout", "20"], stdout=subprocess.PIPE, text=True)
    try:
        with mccs.connect(b.config, "S") as s, mccs.connect(a.config, None) as admin:
            wait_until(lambda: admin.status()["observed"] == {"AASVC": 1}, 20, "the watcher is attached")
            s.send("AASVC", b"seen")
            copy = json.loads(watcher.communicate(timeout=30)[0])
            assert (copy["text"], copy["copy"], watcher.returncode) == ("seen", True, 0)
            with mccs.connect(a.config, "SVC") as handler:
                assert handler.recv(timeout=10).data == b"seen"
    finally:
        watcher.kill()
        watcher.wait()


SERVER = textwrap.dedent("""
    # A server started on demand that stays: it takes every message until it is stopped.
    import os, sys, mccs
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    with mccs.connect(os.environ["MCCS_CONFIG"], os.environ["MCCS_NAME"]) as c:
        while True:
            with open(sys.argv[2], "ab") as out:
                out.write(c.recv().data + b"\\n")
""")


def test_a_started_program_that_stays_takes_everything_and_stops_with_the_daemon(daemon_pair, tmp_path):
    script, pidfile, got = tmp_path / "server.py", tmp_path / "pid", tmp_path / "got"
    script.write_text(SERVER)
    command = " ".join(shlex.quote(str(p)) for p in (sys.executable, script, pidfile, got))
    vl, a, b = daemon_pair(processes=[{"name": "SRV", "start": command}])
    with mccs.connect(b.config, "S") as s:
        for i in range(3):
            s.send("AASRV", b"%d" % i)
        wait_until(lambda: got.exists() and got.read_bytes() == b"0\n1\n2\n", 20, "the program took all three")
    with mccs.connect(a.config, None) as admin:
        status = admin.status()
    assert status["counters"]["programs_started"] == 1 and status["attached"] == {"AASRV": 1}
    pid = int(pidfile.read_text())
    assert a.stop() == 0
    wait_until(lambda: not _alive(pid), 10, "the program stopped")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_malformed_service_requests_on_the_socket_get_errors_and_lose_nothing(daemon_pair):
    import socket as socketlib

    from mccs.client.ipc import LENGTH, frame
    vl, a, b = daemon_pair()
    with mccs.connect(b.config, "S") as s:
        s.send("AASVC", b"kept")
    sock = socketlib.socket(socketlib.AF_UNIX)
    sock.connect(a.cfg.socket)
    sock.settimeout(10)
    buf = b""

    def ask(obj: dict) -> dict:
        nonlocal buf
        sock.sendall(frame(obj))
        while True:
            if len(buf) >= LENGTH.size and len(buf) >= LENGTH.size + LENGTH.unpack_from(buf)[0]:
                n = LENGTH.unpack_from(buf)[0]
                body, buf = json.loads(buf[LENGTH.size:LENGTH.size + n]), buf[LENGTH.size + n:]
                return body
            buf += sock.recv(65536)
    assert ask({"op": "observe", "name": "SVC", "id": 1})["code"] == "no_name"
    assert ask({"op": "hello", "name": "SVC", "observe": 1, "id": 2})["code"] == "bad_request"
    assert ask({"op": "hello", "name": "REQ", "id": 3})["ok"]
    for i, bad in enumerate([{"op": "observe"}, {"op": "observe", "name": ""},
                             {"op": "send", "to": "AASVC", "reply": "yes", "user_id": 1},
                             {"op": "send", "to": "AASVC", "reply": True},
                             {"op": "recv", "reply_to": 70000}, {"op": "recv", "reply_to": "1"}]):
        reply = ask({**bad, "id": 10 + i})
        assert not reply["ok"] and reply["code"] in ("bad_request", "bad_id"), reply
    sock.close()
    with mccs.connect(a.config, "SVC") as h:
        assert h.recv(timeout=10).data == b"kept"
    assert a.running


def test_a_start_program_that_cannot_run_is_logged_and_its_message_kept(daemon_pair, tmp_path):
    gone = {"name": "GONE", "start": str(tmp_path / "no-such-program") + " --once", "backoff_max": 1.0}
    vl, a, b = daemon_pair(processes=[gone])
    with mccs.connect(a.config, "S") as s:
        s.send("AAGONE", b"waits")
        wait_until(lambda: s.status()["counters"].get("programs_failed", 0) >= 2, 20, "two failed starts")
        assert s.status()["lists"]["recv"] == 1
    assert "the program of GONE did not start" in a.log_path.read_text()
