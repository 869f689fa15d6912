"""One host: every rule of docs/DESIGN.md section 2 through the client library, against a real
daemon process with a real SQLite checkpoint."""
from __future__ import annotations

import os
import socket
import sqlite3
import stat
import struct
import threading
import time

import pytest

import mccs
from mccs.client.ipc import frame
from mccs.testbed.hosts import DaemonProcess, write_config

pytestmark = pytest.mark.timeout(60)

# A configured peer with no port behind it: its messages wait on SEND_LIST.
OFFLINE_BB = {"peer": "BB", "port": "/nonexistent/ttyBB", "protocol": "async"}


@pytest.fixture
def host(tmp_path):
    """A running daemon for host AA; yields its DaemonProcess, stops it afterwards."""
    daemons = []

    def make(lines=(OFFLINE_BB,), **keys):
        d = DaemonProcess(write_config(tmp_path, "AA", list(lines), **keys)).start()
        daemons.append(d)
        return d
    yield make
    for d in daemons:
        d.stop()


def test_send_recv_user_id_defaults_to_msg_id(host):
    d = host()
    with mccs.connect(d.config, "P1") as p1, mccs.connect(d.cfg.socket, "P2") as p2:
        msg_id = p1.send("AAP2", b"hello")
        msg = p2.recv()
    assert msg == mccs.Message("AAP1  ", "AAP2  ", msg_id, msg_id, b"hello")


def test_selection_by_from_id_and_user_id(host):
    d = host()
    with mccs.connect(d.config, "A") as a, mccs.connect(d.config, "B") as b, mccs.connect(d.config, "R") as r:
        a.send("AAR", b"a1", user_id=5)
        b.send("AAR", b"b1", user_id=6)
        a.send("AAR", b"a2", user_id=6)
        assert r.recv(from_id="AAB").data == b"b1"
        assert r.recv(user_id=6).data == b"a2"
        assert r.recv(from_id="AAB", wait=False) is None
        assert r.recv(from_id="AAA", user_id=6, wait=False) is None
        assert r.recv().data == b"a1"


def test_wait_nowait_and_timeout(host):
    d = host()
    with mccs.connect(d.config, "W") as w, mccs.connect(d.config, "S") as s:
        assert w.recv(wait=False) is None
        t0 = time.monotonic()
        assert w.recv(timeout=0.4) is None
        assert 0.35 <= time.monotonic() - t0 < 5
        late = threading.Timer(0.3, lambda: s.send("AAW", b"late"))
        late.start()
        assert w.recv().data == b"late"  # a waiting RECV is answered when the message arrives
        late.join()  # the SEND has its reply before `s` is closed


def test_recv_from_unlinked_host_returns_blank_at_once(host):
    d = host()
    with mccs.connect(d.config, "W") as w:
        t0 = time.monotonic()
        assert w.recv(from_id="ZZX") is None  # waits would be forever: no line to ZZ
        assert time.monotonic() - t0 < 2


def test_order_kept_and_from_id_set_by_daemon(host):
    d = host()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        ids = [s.send("AAR", str(i).encode()) for i in range(50)]
        got = [r.recv() for _ in range(50)]
    assert [m.data for m in got] == [str(i).encode() for i in range(50)]
    assert [m.msg_id for m in got] == ids
    assert {m.from_id for m in got} == {"AAS   "}


def test_msg_id_unique_across_restarts(host):
    d = host()
    seen = set()
    for _ in range(3):
        with mccs.connect(d.config, "S") as s:
            for _ in range(5):
                seen.add(s.send("AAS", b"x"))
        d.restart()
    assert len(seen) == 15 and all(0 < i <= 0xFFFF for i in seen)


def test_several_live_connections_per_name(host):
    d = host()
    with mccs.connect(d.config, "DUP") as first, mccs.connect(d.config, "DUP", connect_timeout=0.3) as second:
        first.send("AADUP", b"to either")
        assert second.recv(timeout=5).data == b"to either" and first.recv(wait=False) is None


def test_unknown_host_refused_configured_host_waits(host):
    d = host()
    with mccs.connect(d.config, "S") as s:
        with pytest.raises(mccs.Refused, match="host 'CC' is unknown"):
            s.send("CCX", b"nowhere")
        s.send("BBX", b"stays on SEND_LIST")
        assert s.status()["lists"] == {"wait": 0, "send": 1, "recv": 0}
    mccs.attach(d.config, "PAPR")
    assert mccs.SEND("CCX", b"nowhere") == ("      ", 0)  # the paper: TO_ID blanked
    to_id, msg_id = mccs.SEND("AAPAPR", b"to me", 0)
    assert to_id == "AAPAPR" and msg_id > 0
    assert mccs.RECV("", 0, 1) == ("AAPAPR", b"to me", msg_id, msg_id)
    assert mccs.RECV("", 0, 1) == ("      ", b"", 0, 0)
    mccs.client.library._attached.close()


def test_bad_input_gets_clear_errors(host):
    d = host()
    with mccs.connect(d.config, "S") as s:
        with pytest.raises(mccs.Refused, match="over the maximum of 128"):
            s.send("AAS", b"x" * 129)
        with pytest.raises(mccs.Refused, match="invalid process id"):
            s.send("A", b"x")
    with pytest.raises(mccs.Refused, match="invalid process name"):
        mccs.connect(d.config, "TOOLONG")
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(d.cfg.socket)
    raw.sendall(struct.pack(">I", 5) + b"{nope")  # malformed JSON
    raw.sendall(frame({"op": "launch"}))  # unknown op
    raw.sendall(frame({"op": "send", "to": "AAX", "data": "AA=="}))  # before hello
    raw.sendall(frame({"op": "hello", "name": "RAW"}))
    raw.sendall(frame({"op": "send", "to": "AAX", "data": "!!notbase64"}))
    replies = [_read(raw) for _ in range(5)]
    assert [r["ok"] for r in replies] == [False, False, False, True, False]
    assert "unknown op" in replies[1]["error"] and "base64" in replies[4]["error"]
    raw.sendall(struct.pack(">I", 10_000_000))  # oversized: error, then the connection is closed
    assert "over the limit" in _read(raw)["error"]
    assert raw.recv(10) == b""
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:  # others still served
        s.send("AAR", b"still fine")
        assert r.recv().data == b"still fine"


def _read(sock) -> dict:
    import json
    (n,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    return json.loads(sock.recv(n, socket.MSG_WAITALL))


def test_unconfirmed_message_is_not_lost(host):
    """A process that dies between getting a message and its confirm: the message stays."""
    d = host()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"precious")
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(d.cfg.socket)
    raw.sendall(frame({"op": "hello", "name": "R", "id": 1}) + frame({"op": "recv", "id": 2}))
    _read(raw)
    assert _read(raw)["msg"]["data"]
    raw.close()  # dies without confirming
    with mccs.connect(d.config, "R") as r:
        assert r.recv(timeout=5).data == b"precious"
        assert r.recv(wait=False) is None


def test_send_retry_with_same_request_id_is_stored_once(host):
    d = host()
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(d.cfg.socket)
    raw.sendall(frame({"op": "hello", "name": "S", "id": 0}))
    _read(raw)
    req = {"op": "send", "req": "feedface", "to": "AAR", "data": "eA=="}
    raw.sendall(frame({**req, "id": 1}) + frame({**req, "id": 2}))
    first, second = _read(raw), _read(raw)
    assert first["msg_id"] == second["msg_id"]
    d.restart()
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(d.cfg.socket)
    raw.sendall(frame({"op": "hello", "name": "S", "id": 0}) + frame({**req, "id": 3}))
    _read(raw)
    assert _read(raw)["msg_id"] == first["msg_id"]
    with mccs.connect(d.config, "R") as r:
        assert r.recv().data == b"x"
        assert r.recv(wait=False) is None


def test_back_pressure_with_two_buffers(host):
    d = host(buffers=2)
    sent = {}

    def sender(name):
        with mccs.connect(d.config, name) as s:
            sent[name] = [s.send("AAR", f"{name}{i}".encode()) for i in range(15)]
    threads = [threading.Thread(target=sender, args=(n,)) for n in ("S1", "S2", "S3")]
    for t in threads:
        t.start()
    time.sleep(1.0)
    with mccs.connect(d.config, "R") as r:
        st = r.status()
        assert st["lists"]["recv"] == 2 and st["lists"]["wait"] >= 1  # full, senders wait
        got = [r.recv(timeout=10) for _ in range(45)]
    for t in threads:
        t.join(10)
    assert None not in got
    for name in ("S1", "S2", "S3"):
        mine = [m.data for m in got if m.from_id.startswith("AA" + name)]
        assert mine == [f"{name}{i}".encode() for i in range(15)]


def test_waiting_send_survives_a_crash(host):
    """A SEND waiting for a buffer is on WAIT_LIST in the checkpoint; the library retries it."""
    d = host(buffers=1)
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"first")
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("id", mccs.connect(d.config, "T").send("AAR", b"second")))
    t.start()
    time.sleep(0.5)
    d.restart()
    with mccs.connect(d.config, "R") as r:
        assert r.recv(timeout=10).data == b"first"
        second = r.recv(timeout=10)
        assert second.data == b"second"
        assert r.recv(timeout=1) is None
    t.join(10)
    assert result["id"] == second.msg_id


def test_killed_waiting_receiver_reconnects_and_gets_message(host, tmp_path):
    import subprocess
    import sys
    d = host()
    code = f"import mccs; c = mccs.connect({str(d.config)!r}, 'R'); print(c.recv(), flush=True)"
    waiter = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(1.0)
    waiter.kill()
    waiter.wait()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"for the next R")
    with mccs.connect(d.config, "R") as r:
        assert r.recv(timeout=5).data == b"for the next R"


def test_checkpoint_guards(host, tmp_path):
    d = host()
    second = DaemonProcess(write_config(tmp_path / "two", "AA", [], checkpoint=str(tmp_path / "AA.db")))
    with pytest.raises(RuntimeError, match="in use by another daemon"):
        second.start()
    d.stop()
    other = write_config(tmp_path, "ZZ", [], checkpoint="AA.db", socket="run/ZZ.sock")
    with pytest.raises(RuntimeError, match="belongs to host 'AA'"):
        DaemonProcess(other).start()
    db = tmp_path / "AA.db"
    db.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    before = db.read_bytes()
    with pytest.raises(RuntimeError, match="not a usable SQLite database|integrity"):
        DaemonProcess(d.config).start()
    assert db.read_bytes() == before  # never overwritten


def test_socket_and_checkpoint_are_owner_only(host):
    d = host()
    assert stat.S_IMODE(os.stat(d.cfg.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d.cfg.checkpoint).st_mode) == 0o600


def test_sigterm_stops_cleanly_and_lists_survive(host):
    d = host()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"kept")
        s.send("BBX", b"kept too")
    assert d.stop() == 0
    d.start()
    with mccs.connect(d.config, "R") as r:
        assert r.status()["lists"] == {"wait": 0, "send": 1, "recv": 1}
        assert r.recv().data == b"kept"


def test_wrong_types_in_requests_get_errors_not_crashes(host):
    d = host()
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(d.cfg.socket)
    bad = [{"op": "hello", "name": 5}, {"op": "hello", "name": "T"}, {"op": "hello", "name": "U"},
           {"op": "recv", "from": 123},
           {"op": "recv", "timeout": "soon"}, {"op": "recv", "user_id": 70000}, {"op": "confirm", "rid": [1]},
           {"op": "send", "to": "AAX", "data": "eA==", "user_id": -1}, {"op": "send", "to": None, "data": "eA=="},
           {"op": "recv", "timeout": float("nan")}, {"op": "recv", "timeout": float("inf")},
           {"op": "recv", "user_id": float("inf")}, {"op": "send", "to": "AAX", "data": "eA==", "req": [1]}, [1, 2]]
    for obj in bad:
        raw.sendall(frame(obj) if isinstance(obj, dict) else struct.pack(">I", 5) + b"[1,2]")
    replies = [_read(raw) for _ in bad]
    assert [r["ok"] for r in replies] == [False, True] + [False] * 12
    assert "connect again" in replies[2]["error"]
    with mccs.connect(d.config, "S") as s:
        assert s.status()["counters"]["bad_requests"] >= 13
    before = _cpu_seconds(d.proc.pid)  # a NaN timer would spin the loop: the daemon idles
    time.sleep(1.0)
    assert _cpu_seconds(d.proc.pid) - before < 0.5


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_msg_id_wrap_does_not_hide_a_new_message(host):
    """After 65,535 SENDs the MSG_ID comes round: a receiver that got the old message with that
    id must still get the new one (its library only drops a key it has not yet settled)."""
    d = host()
    r = mccs.connect(d.config, "R")
    with mccs.connect(d.config, "X") as x:
        first = x.send("AAR", b"first")
        assert r.recv(timeout=5).msg_id == first
        assert r.recv(wait=False) is None  # carries the confirm of "first": its MSG_ID is free again
        d.stop()  # the counter jumps to the end of the id space, as 65,534 SENDs would take it
        with sqlite3.connect(d.cfg.checkpoint) as db:
            db.execute("UPDATE meta SET value = '65535' WHERE key = 'next_msg_id'")
        db.close()
        d.start()
        ids = [x.send("AAR", b"second"), x.send("AAR", b"third")]
    assert ids == [65535, first]
    got = [r.recv(timeout=5) for _ in range(2)]
    assert [(m.msg_id, m.data) for m in got] == [(65535, b"second"), (first, b"third")]
    r.close()
