"""Hostile requests on the process socket, against a real daemon process: each was found by an
adversarial test (2026-11-26) to stop the daemon, cut off other clients' replies or leave a
message handed to nobody. Each must get a `bad_request` reply (or be served), and leave the
daemon and every other client as they were."""
from __future__ import annotations

import json
import socket
import threading

import msgpack
import pytest

import mccs
from mccs.client.ipc import LENGTH, frame, unframe
from mccs.testbed.hosts import DaemonProcess, write_config

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def daemon(tmp_path):
    d = DaemonProcess(write_config(tmp_path, "AA", [])).start()
    yield d
    d.stop()


def _raw(d: DaemonProcess, name: str = "H") -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(d.cfg.socket)
    sock.settimeout(10)
    _write(sock, json.dumps({"op": "hello", "name": name}).encode())
    assert _read(sock)["ok"]
    return sock


def _write(sock: socket.socket, *bodies: bytes) -> None:
    sock.sendall(b"".join(LENGTH.pack(len(b)) + b for b in bodies))


def _read(sock: socket.socket, codec: str = "json") -> dict:
    (n,) = LENGTH.unpack(sock.recv(LENGTH.size, socket.MSG_WAITALL))
    return unframe(sock.recv(n, socket.MSG_WAITALL), codec)


def _still_serves(d: DaemonProcess) -> None:
    """The daemon never rebuilt its core, and a message still goes from one process to another."""
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        assert s.status()["counters"]["recoveries"] == 0
        s.send("AAR", b"after")
        assert r.recv(timeout=5).data == b"after"


def test_half_a_surrogate_pair_is_refused(daemon):
    """`\\ud800` is legal JSON but no UTF-8: as a SEND's id it went into a stored key, SQLite
    refused it mid-transaction, and after five such requests the daemon stopped (exit 70)."""
    sock = _raw(daemon)
    for i in range(6):
        _write(sock, b'{"op":"send","to":"AAR","data":"","id":"\\ud800"}')
        reply = _read(sock)
        assert reply["ok"] is False and reply["code"] == "bad_request" and "surrogate" in reply["error"], reply
    _write(sock, b'{"op":"send","to":"AAR","data":"","id":"\\ud83d\\ude00"}')  # a whole pair is text
    reply = _read(sock)
    assert (reply["id"], reply["ok"], reply["msg_id"]) == ("\N{GRINNING FACE}", True, 1)
    sock.close()
    with mccs.connect(daemon.config, "R") as r:
        assert r.recv(timeout=5).data == b""
    _still_serves(daemon)


@pytest.mark.parametrize("field", ["timeout", "id", "user_id"])
def test_an_integer_beyond_64_bits_is_refused_and_the_connection_kept(daemon, field):
    """JSON integers have no bound: 10**400 made a float conversion raise (the connection dropped
    without a reply) and 2**70 as an id made the MessagePack reply fail."""
    sock = _raw(daemon)
    _write(sock, b'{"op":"recv","wait":true,"%s":%d}' % (field.encode(), 10 ** 400))
    reply = _read(sock)
    assert reply["ok"] is False and "beyond 64 bits" in reply["error"], reply
    _write(sock, b'{"op":"ping","id":7}')
    assert _read(sock)["id"] == 7
    sock.close()
    _still_serves(daemon)


def test_an_id_the_other_codec_cannot_carry_does_not_cost_another_client_its_message(daemon):
    """A MessagePack RECV whose id is bytes, then a switch back to JSON: the reply to that RECV
    could not be written, the pass stopped there, and a RECV answered later in the same pass
    (another client's, its message handed to it) never got its reply."""
    got = []
    with mccs.connect(daemon.config, "V") as victim, mccs.connect(daemon.config, "S") as s:
        waiting = threading.Thread(target=lambda: got.append(victim.recv(timeout=20)))
        waiting.start()
        sock = _raw(daemon, "X")
        _write(sock, frame({"op": "codec", "name": "msgpack"})[LENGTH.size:])
        assert _read(sock)["codec"] == "msgpack"
        _write(sock, msgpack.packb({"op": "recv", "wait": True, "id": b"\x00"}))
        reply = _read(sock, "msgpack")
        assert reply == {"id": None, "ok": False, "code": "bad_request", "error": "id must be a number or a string"}
        s.send("AAV", b"for the victim")
        waiting.join(timeout=20)
        sock.close()
    assert [m.data for m in got] == [b"for the victim"]
    _still_serves(daemon)


def test_thousands_of_requests_answered_at_once_in_one_write(daemon):
    """Requests answered as they are read (codec, status) called the reading back one level
    deeper each: 2,000 in one write ended in a RecursionError and a dropped connection, and one
    such in the middle of taking a confirm left a message off the lists but in the checkpoint."""
    with mccs.connect(daemon.config, "S") as s:
        s.send("AAH", b"one")
    sock = _raw(daemon)
    _write(sock, json.dumps({"op": "recv", "id": 0}).encode())
    rid = _read(sock)["msg"]["rid"]
    codec = json.dumps({"op": "codec", "name": "json"}).encode()
    _write(sock, *[codec] * 2000, json.dumps({"op": "confirm", "rid": rid, "id": 1}).encode())
    replies = [_read(sock) for _ in range(2001)]
    assert [r.get("codec") for r in replies[:2000]] == ["json"] * 2000
    assert replies[-1]["id"] == 1 and replies[-1]["ok"] is True
    sock.close()
    with mccs.connect(daemon.config, None) as admin:
        assert admin.status()["lists"]["recv"] == 0
    _still_serves(daemon)


def test_a_client_whose_daemon_keeps_hanging_up_gives_up_in_its_reconnect_time(tmp_path):
    """A daemon that drops a client at every asking of one request (a reply it cannot encode, say)
    kept the client reconnecting and asking for ever, `mccs queue list` thousands of times a second
    (an adversarial test). The client gives up after its reconnect time, as for a daemon gone."""
    import time

    from mccs.client import Client, DaemonUnreachable
    path = str(tmp_path / "hangs-up.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(16)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.close()  # whatever it asks
    threading.Thread(target=serve, daemon=True).start()
    client = Client(path, None, connect_timeout=1.0, reconnect_timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable, match="keeps closing"):
        client.status()
    assert time.monotonic() - t0 < 10 and len(accepted) > 1
    server.close()
