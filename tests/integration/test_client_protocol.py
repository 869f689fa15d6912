"""The process protocol's round-trip savers (issue 15, item 2) against real daemon processes: a
RECV that carries the confirms of the messages handed before, send_many (one request, one
commit, all or none) and recv_many; exactly once across a killed process and a killed daemon."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import msgpack
import pytest

import mccs
from mccs.client.ipc import LENGTH, b64, frame, unframe
from mccs.testbed.hosts import DaemonProcess, wait_until, write_config

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def host(tmp_path):
    """make(**host_keys): a running daemon for host AA (no lines); stopped afterwards."""
    daemons = []

    def make(**keys):
        daemons.append(DaemonProcess(write_config(tmp_path, "AA", [], **keys)).start())
        return daemons[-1]
    yield make
    for d in daemons:
        d.stop()


def _status(d: DaemonProcess) -> dict:
    with mccs.connect(d.config, None) as admin:
        return admin.status()


def _raw(d: DaemonProcess, name: str = "R") -> socket.socket:
    """A connection speaking the socket protocol by hand, said hello as `name`."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(d.cfg.socket)
    sock.settimeout(10)
    assert _ask(sock, {"op": "hello", "name": name})["ok"]
    return sock


def _ask(sock: socket.socket, request: dict | bytes, codec: str = "json") -> dict:
    """A request (an object, or a frame's body as it is) and its reply."""
    body = request if isinstance(request, bytes) else frame(request, codec)[LENGTH.size:]
    sock.sendall(LENGTH.pack(len(body)) + body)
    (n,) = LENGTH.unpack(sock.recv(LENGTH.size, socket.MSG_WAITALL))
    return unframe(sock.recv(n, socket.MSG_WAITALL), codec)


# -- a RECV carries the confirm ------------------------------------------------------------------
def test_recv_carries_the_previous_confirm(host):
    """One request per message received: no confirm of its own, and each message is off RECV_LIST
    once the next RECV has been answered."""
    d = host()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R", carry_confirms=True) as r:
        for k in range(10):
            s.send("AAR", b"m%d" % k)
        before = _status(d)["counters"]["requests"]
        assert r.recv(timeout=5).data == b"m0"
        assert _status(d)["lists"]["recv"] == 10  # handed, not yet confirmed
        assert [r.recv(timeout=5).data for _ in range(9)] == [b"m%d" % k for k in range(1, 10)]
        assert _status(d)["lists"]["recv"] == 1  # the last one waits for the next request
        assert _status(d)["counters"]["requests"] - before == 10
        assert r.recv(wait=False) is None
        assert _status(d)["lists"]["recv"] == 0



def test_a_recv_that_waits_leaves_its_confirms_to_the_next_pass_and_loses_none(host):
    """A RECV that waits, carrying the confirm of the message before, runs no pass of its own: the
    next message's pass commits the confirm (one pass a message, not two); every confirm is
    committed by the end: after a restart nothing is handed again."""
    d = host()
    n, got = 12, []
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R", carry_confirms=True) as r:
        def take():
            got.extend(r.recv(timeout=10).data for _ in range(n))
        taker = threading.Thread(target=take)
        taker.start()
        time.sleep(0.2)
        before = _status(d)["counters"]["passes"]
        for k in range(n):
            s.send("AAR", b"m%d" % k)
            time.sleep(0.1)  # the RECV is back and waiting before the next message
        taker.join(30)
        passes = _status(d)["counters"]["passes"] - before - 1  # the status request's own turn
        assert got == [b"m%d" % k for k in range(n)]
        print(f"\nCARRIED CONFIRMS: {passes} passes for {n} messages sent and received one at a time")
        assert passes <= 1.5 * n  # two a message if each waiting RECV ran a pass for its confirm
    d.stop()  # SIGTERM; the last confirm went with close(): nothing left to hand
    d.start()
    with mccs.connect(d.config, "R") as r:
        assert r.recv(wait=False) is None


def test_other_requests_and_close_confirm_too(host):
    d = host()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"one")
        s.send("AAR", b"two")
    r = mccs.connect(d.config, "R", carry_confirms=True)
    assert r.recv(timeout=5).data == b"one"
    r.send("AAX", b"a send confirms on its way")
    wait_until(lambda: _status(d)["lists"]["recv"] == 2, 5, "the confirm sent before the SEND")  # two + X's
    assert r.recv(timeout=5).data == b"two"
    r.close()
    assert _status(d)["lists"]["recv"] == 1  # X's message only


def test_a_carried_confirm_by_hand_and_a_stale_one(host):
    """The wire: `confirm` in a RECV takes the message off RECV_LIST before the RECV is answered; a
    rid not handed to this connection (asked again) is ignored; a malformed one is refused."""
    d = host()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"one")
        s.send("AAR", b"two")
    sock = _raw(d)
    first = _ask(sock, {"op": "recv", "id": 1})["msg"]
    second = _ask(sock, {"op": "recv", "id": 2, "confirm": first["rid"]})["msg"]
    assert second["data"] == b64(b"two") and _status(d)["lists"]["recv"] == 1
    assert _ask(sock, {"op": "recv", "id": 3, "wait": False, "confirm": [first["rid"], second["rid"]]}) == \
        {"id": 3, "ok": True, "msg": None}
    assert _status(d)["lists"]["recv"] == 0
    for bad in ({"confirm": "1"}, {"confirm": [1, "2"]}, {"confirm": True}, {"max": 0}, {"max": 5, "user_id": 3}):
        reply = _ask(sock, {"op": "recv", "id": 9, "wait": False, **bad})
        assert reply["ok"] is False and reply["code"] == "bad_request", bad
    sock.close()
    assert _status(d)["counters"]["bad_requests"] == 5


WORKER = """
import sys, mccs
c = mccs.connect(sys.argv[1], "R", carry_confirms=sys.argv[2] == "carry")
print(c.recv(timeout=10).data.decode(), flush=True)
sys.stdin.read()  # killed here, between this RECV and the next
"""


@pytest.mark.parametrize("carry", [True, False])
def test_process_killed_between_recvs(host, carry):
    """With carried confirms, the message returned last is handed again after the process is
    killed before its next request; by default it was confirmed as recv() returned it: never again."""
    d = host()
    with mccs.connect(d.config, "S") as s:
        s.send("AAR", b"first")
        s.send("AAR", b"second")
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(d.config), "carry" if carry else "at once"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert worker.stdout.readline() == b"first\n"
    finally:
        worker.kill()  # kill -9
        worker.wait()
    with mccs.connect(d.config, "R") as r:
        again = [b"first"] if carry else []
        assert [r.recv(timeout=5).data for _ in range(len(again) + 1)] == again + [b"second"]
        assert r.recv(wait=False) is None
    assert _status(d)["lists"]["recv"] == 0


@pytest.mark.parametrize("many,codec,carry", [(False, "msgpack", True), (True, "msgpack", True),
                                              (False, "json", False), (True, "msgpack", False)])
def test_daemon_killed_between_recvs_loses_nothing_and_repeats_nothing(host, many, codec, carry):
    """kill -9 of the daemon while messages are handed and unconfirmed: after the restart the
    library gets them again and drops what it returned; every message exactly once."""
    d = host()
    sent = [b"m%d" % k for k in range(12)]
    with mccs.connect(d.config, "S") as s:
        assert s.send_many([("AAR", m) for m in sent]) == list(range(1, 13))
    with mccs.connect(d.config, "R", reconnect_timeout=30, codec=codec, carry_confirms=carry) as r:
        assert r.codec == codec
        take = (lambda: r.recv_many(3, timeout=10)) if many else (lambda: [r.recv(timeout=10)])
        got = take() + take()
        d.restart()  # kill -9, then start
        while len(got) < len(sent):
            got += take()
        assert [m.data for m in got] == sent
        assert r.recv(wait=False) is None
    assert _status(d)["lists"]["recv"] == 0


# -- send_many -----------------------------------------------------------------------------------
def test_send_many_is_one_request_one_commit(host):
    d = host()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        before = _status(d)["counters"]
        ids = s.send_many([("AAR", b"a"), ("AAR", b"b", 7), ("AAX", b"c")], priority=2)
        after = _status(d)["counters"]
        assert after["requests"] - before["requests"] == 1 and after["commits"] - before["commits"] == 1
        got = [r.recv(timeout=5) for _ in range(2)]
        assert [(m.data, m.msg_id, m.user_id) for m in got] == [(b"a", ids[0], ids[0]), (b"b", ids[1], 7)]
        assert s.send_many([]) == []


def test_send_many_with_a_bad_entry_stores_nothing(host):
    d = host()
    with mccs.connect(d.config, "S") as s:
        for batch, code, says in (([("AAR", b"ok"), ("ZZR", b"unknown host")], "unknown_host", "msgs[1]"),
                                  ([("AAR", b"ok"), ("AAR", b"x" * 129)], "too_large", "message 1"),
                                  ([("AAR", b"ok"), ("A", b"bad id")], "bad_id", "message 1"),
                                  ([("AAR", b"ok")] * 1001, "too_large", "at most 1000")):
            with pytest.raises(mccs.Refused) as e:
                s.send_many(batch)
            assert e.value.code == code and says in str(e.value)
    sock = _raw(d, "S")
    entry = {"to": "AAR", "data": b64(b"ok")}
    for msgs, says in (("x", "msgs must be"), ([], "1 to 1000"), ([entry, 5], "msgs[1]: an entry is an object"),
                       ([entry, {"to": "AAR", "data": "not base64!"}], "msgs[1]: data is not valid base64"),
                       ([entry, {**entry, "priority": 9}], "msgs[1]: priority 9"),
                       ([entry, {**entry, "req": "r"}], "msgs[1]: an entry has no bin or req"),
                       ([entry, {"to": "ZZR", "data": ""}], "msgs[1]: host 'ZZ' is unknown")):
        reply = _ask(sock, {"op": "send_many", "id": 1, "msgs": msgs})
        assert reply["ok"] is False and says in reply["error"], (msgs, reply)
    sock.close()
    status = _status(d)
    assert status["lists"] == {"wait": 0, "send": 0, "recv": 0} and status["counters"].get("accepted", 0) == 0
    with mccs.connect(d.config, "R") as r:
        assert r.recv(wait=False) is None


def test_send_many_waits_for_room_for_all_of_it(host):
    """buffers = 4, two messages on RECV_LIST: a batch of three waits whole on WAIT_LIST until a
    message is taken, then is stored whole; a batch over the buffers is refused."""
    d = host(buffers=4)
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R", carry_confirms=True) as r:
        s.send("AAR", b"one")
        s.send("AAR", b"two")
        with pytest.raises(mccs.Refused) as e:
            s.send_many([("AAR", b"x")] * 5)
        assert e.value.code == "too_large"
        done = []
        sender = threading.Thread(target=lambda: done.append(s.send_many([("AAR", b"b%d" % k) for k in range(3)])))
        sender.start()
        wait_until(lambda: _status(d)["lists"]["wait"] == 1, 5, "the batch waiting")
        assert _status(d)["lists"]["recv"] == 2 and not done
        assert r.recv(timeout=5).data == b"one"
        assert r.recv(timeout=5).data == b"two"  # carries one's confirm: room for the three
        sender.join(10)
        assert len(done[0]) == 3 and _status(d)["lists"] == {"wait": 0, "send": 0, "recv": 4}
        assert [r.recv(timeout=5).data for _ in range(3)] == [b"b0", b"b1", b"b2"]


def test_send_many_asked_again_after_a_restart_is_stored_once(host):
    d = host()
    request = {"op": "send_many", "id": 1, "req": "batch-1", "msgs": [{"to": "AAR", "data": b64(b"m%d" % k)}
                                                                      for k in range(3)]}
    sock = _raw(d, "S")
    ids = _ask(sock, request)["msg_ids"]
    sock.close()
    d.restart()
    sock = _raw(d, "S")
    assert _ask(sock, request)["msg_ids"] == ids
    sock.close()
    assert _status(d)["lists"]["recv"] == 3


def test_recv_many(host):
    d = host()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        s.send_many([("AAR", b"m%d" % k) for k in range(5)])
        s.send("AAR", b"urgent", priority=7)
        assert [m.data for m in r.recv_many(4, timeout=5)] == [b"urgent", b"m0", b"m1", b"m2"]
        assert [m.data for m in r.recv_many(10, timeout=5)] == [b"m3", b"m4"]
        assert r.recv_many(10, wait=False) == []
        assert _status(d)["lists"]["recv"] == 0
        t0 = time.monotonic()
        assert r.recv_many(10, timeout=0.3) == [] and time.monotonic() - t0 >= 0.3


# -- MessagePack frames --------------------------------------------------------------------------
def test_msgpack_and_json_clients_side_by_side(host):
    d = host()
    data = bytes(range(256))[:128]
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R", codec="json") as r:
        assert (s.codec, r.codec) == ("msgpack", "json")
        ids = [s.send("AAR", data, 5), *s.send_many([("AAR", data[::-1])])]
        got = [r.recv(timeout=5) for _ in ids]
        assert [(m.msg_id, m.data) for m in got] == [(ids[0], data), (ids[1], data[::-1])]
        r.send("AAS", data)
        assert s.recv(timeout=5).data == data


def test_msgpack_by_hand(host):
    """The switch, MessagePack requests with data as it is, and what is refused: an unknown codec,
    a body that is not MessagePack, not a map, or data that is neither bytes nor base64."""
    d = host()
    sock = _raw(d, "S")
    assert _ask(sock, {"op": "codec", "name": "cbor", "id": 1})["code"] == "bad_request"
    assert _ask(sock, {"op": "codec", "name": "msgpack", "id": 2}) == {"id": 2, "ok": True, "codec": "msgpack"}
    assert _ask(sock, {"op": "send", "to": "AAR", "data": b"\x00raw", "id": 3}, "msgpack")["msg_id"] == 1
    for body, says in ((b"\xc1", "malformed request"), (msgpack.packb([1, 2]), "not an object"),
                       (msgpack.packb({"op": "send", "to": "AAR", "data": 5}), "data must be a string")):
        reply = _ask(sock, body, "msgpack")
        assert reply["ok"] is False and says in reply["error"], reply
    assert _ask(sock, {"op": "recv", "id": 4, "wait": False}, "msgpack")["msg"] is None  # S has nothing
    sock.close()
    with mccs.connect(d.config, "R", codec="json") as r:
        assert r.recv(timeout=5).data == b"\x00raw" and r.recv(wait=False) is None


def test_error_codes_are_an_enum_of_the_documented_strings_and_go_on_the_wire_as_them():
    """Code's values are what docs/SOCKET.md and the client read; both codecs send the plain string."""
    import json

    import msgpack

    from mccs.client.ipc import frame
    from mccs.core.requests import Code
    assert ({"bad_request", "bad_id", "unknown_host", "too_large", "disk_full", "not_permitted"}
            <= {c.value for c in Code})
    for codec, load in (("json", json.loads), ("msgpack", msgpack.unpackb)):
        assert load(frame({"code": Code.TOO_LARGE}, codec)[4:]) == {"code": "too_large"}
