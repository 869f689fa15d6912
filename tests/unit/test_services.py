"""Services in the daemon's core, in memory (mccs.testbed.hostsim: real checkpoint files, a virtual
clock): several handlers of a name, observers, request and reply, dispositions and programs
started on demand. The same features with real daemons: tests/integration/test_services_daemons.py."""
from __future__ import annotations

import base64
import json

import pytest

from mccs.config import ProcessConfig
from mccs.core.sessions import Creds
from mccs.testbed.hostsim import SimNet, line

pytestmark = pytest.mark.timeout(60)


def _data(reply: dict) -> bytes:
    return base64.b64decode(reply["msg"]["data"])


@pytest.fixture
def aa(tmp_path):
    """Host AA (a line to BB, which is not simulated) with 4 buffers and [[process]] tables."""
    return SimNet(tmp_path, {"AA": [line("BB")]}, buffers=4,
                  processes={"AA": [ProcessConfig("PRNT", start="print-server --once", backoff_max=4.0),
                                    ProcessConfig("DROP", disposition="discard"),
                                    ProcessConfig("SAFE", uid=4242)]})


# -- handlers -------------------------------------------------------------------------------------
def test_each_message_goes_to_the_handler_that_asks_first(aa):
    h1, h2, s = aa.client("AA", "SVC"), aa.client("AA", "SVC"), aa.client("AA", "S")
    r2 = h2.request({"op": "recv"})
    r1 = h1.request({"op": "recv"})
    aa.run(duration=0.5)
    s.send("AASVC", b"one")
    assert _data(aa.run(lambda: h2.reply(r2))) == b"one" and h1.reply(r1) is None
    s.send("AASVC", b"two")
    assert _data(aa.run(lambda: h1.reply(r1))) == b"two"


def test_a_handler_gone_before_its_confirm_leaves_the_message_to_another_once(aa):
    h1, h2, s = aa.client("AA", "SVC"), aa.client("AA", "SVC"), aa.client("AA", "S")
    s.send("AASVC", b"job")
    assert _data(h1.recv(confirm=False)) == b"job"
    waiting = h2.request({"op": "recv"})
    aa.run(duration=0.5)
    assert h2.reply(waiting) is None  # h1 holds it
    h1.close()
    got = aa.run(lambda: h2.reply(waiting))["msg"]
    assert _data({"msg": got}) == b"job" and h2.ask({"op": "confirm", "rid": got["rid"]})["ok"]
    assert aa.client("AA", "SVC").recv(wait=False)["msg"] is None
    assert aa["AA"].kernel.counters["delivered"] == 1


# -- observers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [0, 0x02, 0x04, 0x08, 0x40, 0x40 | 0x80, 0x40 | 0x08, 0x40 | 0x80 | 0x08])
def test_reply_flags_travel_as_a_notice_from_a_process(flags):
    from mccs.core.envelope import CARRIED, NOTICE, from_wire, to_wire
    wire = to_wire(flags)
    assert wire & ~CARRIED == 0 and from_wire(wire, from_daemon=bool(flags & NOTICE)) == flags
    assert from_wire(NOTICE, from_daemon=False) == 0x40  # a notice from a process is a reply


def test_observers_get_a_copy_of_each_arrival_and_never_hold_up_the_handler(aa):
    obs = aa.client("AA", None)
    assert obs.ask({"op": "hello", "name": "SVC", "observe": True})["ok"]
    other = aa.client("AA", "MON")
    assert other.ask({"op": "observe", "name": "SVC"})["observing"] == "AASVC "
    h, s = aa.client("AA", "SVC"), aa.client("AA", "S")
    for i in range(6):  # more than `buffers` (4): the observer that does not read misses the oldest
        s.send("AASVC", b"m%d" % i)
        assert _data(h.recv()) == b"m%d" % i  # the handler gets each
    copies = [obs.recv(wait=False)["msg"] for _ in range(5)]
    assert [base64.b64decode(c["data"]) for c in copies[:4]] == [b"m2", b"m3", b"m4", b"m5"] and copies[4] is None
    assert all(c["copy"] and c["to_id"] == "AASVC " and "rid" not in c for c in copies[:4])
    assert aa["AA"].kernel.counters["copies_missed"] == 2 * 2
    s.send("AAMON", b"own")  # the other observer: its own messages and the copies, in arrival order
    got = [other.recv(wait=False)["msg"] for _ in range(5)]
    assert [base64.b64decode(m["data"]) for m in got] == [b"m2", b"m3", b"m4", b"m5", b"own"]
    assert [m.get("copy", False) for m in got] == [True] * 4 + [False]


def test_an_observer_gets_no_copy_twice_across_a_restart(aa):
    obs = aa.client("AA", None)
    obs.ask({"op": "hello", "name": "SVC", "observe": True})
    s = aa.client("AA", "S")
    s.send("AASVC", b"before")
    assert _data(obs.recv()) == b"before"
    aa["AA"].crash()  # RECV_LIST restored with the message, no handler took it yet
    obs = aa.client("AA", None)
    obs.ask({"op": "hello", "name": "SVC", "observe": True})
    s = aa.client("AA", "S")
    s.send("AASVC", b"after")
    assert _data(obs.recv()) == b"after"
    assert obs.recv(wait=False)["msg"] is None
    h = aa.client("AA", "SVC")
    assert [_data(h.recv()) for _ in range(2)] == [b"before", b"after"]


def test_observing_a_reserved_name_takes_its_owner(aa):
    stranger = aa["AA"].client("MON", Creds(1, 1000, 1000))
    assert stranger.ask({"op": "observe", "name": "SAFE"})["code"] == "not_permitted"
    assert aa["AA"].client(None, Creds(1, 1000, 1000)).ask(
        {"op": "hello", "name": "SAFE", "observe": True})["code"] == "not_permitted"
    assert aa["AA"].client("MON", Creds(2, 4242, 1000)).ask({"op": "observe", "name": "SAFE"})["ok"]
    assert stranger.ask({"op": "observe", "name": "MCCS"})["code"] == "not_permitted"  # the daemon's own


# -- request and reply -----------------------------------------------------------------------------
def test_a_reply_goes_only_to_its_request_and_carries_ok(pair):
    req, svc = pair.client("AA", "REQ"), pair.client("BB", "SVC")
    msg_id = req.send("BBSVC", b"question", ttl=30.0)["msg_id"]
    question = svc.recv()["msg"]
    assert question["msg_id"] == msg_id and 25.0 < question["ttl"] <= 30.0
    req.send("AAREQ", b"plain, same USER_ID", user_id=msg_id)
    svc.send("AAREQ", b"no such job", user_id=msg_id, reply=True, ok=False, ttl=question["ttl"])
    answer = req.recv(reply_to=msg_id)["msg"]
    assert _data({"msg": answer}) == b"no such job" and answer["reply"] and answer["ok"] is False
    assert _data(req.recv()) == b"plain, same USER_ID"  # a plain RECV never takes a reply
    assert req.recv(wait=False)["msg"] is None


def test_a_reply_after_its_request_gave_up_is_dropped(aa):
    req, svc = aa.client("AA", "REQ"), aa.client("AA", "SVC")
    msg_id = req.send("AASVC", b"q", ttl=2.0)["msg_id"]
    assert req.recv(reply_to=msg_id, timeout=1.0)["msg"] is None
    svc.send("AAREQ", b"late", user_id=msg_id, reply=True, ttl=60.0)
    aa.run(duration=0.2)
    kernel = aa["AA"].kernel
    assert len(kernel.lists.recv) == 1 and kernel.counters["expired"] == 1  # only the request is left
    assert req.recv(reply_to=msg_id, wait=False)["msg"] is None


def test_a_reply_handed_at_its_time_and_given_back_is_dropped(aa):
    req, svc = aa.client("AA", "REQ"), aa.client("AA", "SVC")
    svc.send("AAREQ", b"taken late", user_id=77, reply=True, ttl=1.0)
    assert req.recv(reply_to=77, confirm=False)["msg"]["reply"]
    aa.run(duration=1.5)
    assert len(aa["AA"].kernel.lists.recv) == 1  # handed: not dropped under its process
    req.close()  # gone unconfirmed: given back, and dropped now that its time has passed
    aa.run(duration=1.5)
    assert len(aa["AA"].kernel.lists.recv) == 0


def test_a_reply_not_taken_in_its_time_is_dropped_after_a_restart_too(aa):
    aa.client("AA", "REQ")  # the requester is attached, and never takes its reply
    svc = aa.client("AA", "SVC")
    svc.send("AAREQ", b"unclaimed", user_id=77, reply=True, ttl=3.0)
    aa["AA"].crash()  # what gave up is forgotten; the reply's time is in the checkpoint
    aa.run(duration=2.5)
    assert len(aa["AA"].kernel.lists.recv) == 1
    aa.run(duration=1.0)
    assert len(aa["AA"].kernel.lists.recv) == 0


@pytest.mark.parametrize("bad, why", [
    ({"op": "send", "to": "AAX", "reply": True}, "user_id is the MSG_ID"),
    ({"op": "send", "to": "AAX", "user_id": 3, "ok": False}, "ok=false"),
    ({"op": "send", "to": "AAX", "user_id": 3, "reply": True, "receipt": True}, "no receipt"),
    ({"op": "recv", "reply_to": -1}, "reply_to"),
    ({"op": "observe", "name": "TOOLONG"}, ""),
    ({"op": "hello", "name": "X", "observe": "yes"}, "observe must be true or false"),
])
def test_bad_service_requests_are_refused_by_name(aa, bad, why):
    reply = aa.client("AA", None if bad["op"] == "hello" else "P").ask(bad)
    assert not reply["ok"] and why in reply["error"]


# -- dispositions and programs ---------------------------------------------------------------------
def test_discard_returns_what_arrives_while_no_handler_is_attached(aa):
    s = aa.client("AA", "S")
    msg_id = s.send("AADROP", b"nobody home")["msg_id"]
    notice = s.recv()["msg"]
    body = json.loads(_data({"msg": notice}))
    assert notice["from_id"] == "AAMCCS" and body["notice"] == "undeliverable" and body["msg_id"] == msg_id
    h = aa.client("AA", "DROP")
    s.send("AADROP", b"welcome")
    assert _data(h.recv()) == b"welcome"


def _starts(host) -> list[str]:
    return [st.pid for fx in host.passes for st in fx.starts]


def test_a_program_starts_once_for_waiting_messages_and_backs_off_when_it_takes_none(aa):
    host, s = aa["AA"], aa.client("AA", "S")
    s.send("AAPRNT", b"page 1")
    s.send("AAPRNT", b"page 2")
    aa.run(duration=1.0)
    assert _starts(host) == ["AAPRNT"]  # at most one at a time
    host.program_exited("AAPRNT", 1)  # crashed: took nothing
    aa.run(duration=0.9)
    assert len(_starts(host)) == 1
    aa.run(duration=0.2)
    assert len(_starts(host)) == 2  # after 1 s
    host.program_exited("AAPRNT", 1)
    aa.run(duration=1.9)
    assert len(_starts(host)) == 2
    aa.run(duration=0.2)
    assert len(_starts(host)) == 3  # after 2 s
    p = aa.client("AA", "PRNT")  # this one works: takes a page and exits
    assert _data(p.recv()) == b"page 1"
    p.close()
    host.program_exited("AAPRNT", 0)
    aa.run(duration=0.1)
    assert len(_starts(host)) == 4  # at once: page 2 waits
    assert len(host.kernel.lists.recv) == 1 and host.kernel.status()["programs"]["PRNT"]["running"]


def test_no_program_starts_while_a_handler_is_attached(aa):
    p = aa.client("AA", "PRNT")
    aa.client("AA", "S").send("AAPRNT", b"page")
    aa.run(duration=1.0)
    assert _starts(aa["AA"]) == []
    p.close()
    aa.run(duration=0.1)
    assert _starts(aa["AA"]) == ["AAPRNT"]


def test_an_observer_gets_a_large_text_while_its_message_is_here(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")]}, max_message=200_000)
    obs, late = net.client("AA", None), net.client("AA", None)
    obs.ask({"op": "hello", "name": "BIG", "observe": True})
    late.ask({"op": "hello", "name": "BIG", "observe": True})
    s, h = net.client("AA", "S"), net.client("AA", "BIG")
    text = bytes(range(256)) * 400  # 102,400 bytes: kept in the checkpoint only
    s.send("AABIG", text)
    assert _data(obs.recv()) == text  # read from the checkpoint, as the handler's copy is
    assert _data(h.recv()) == text  # taken and confirmed: its text is gone
    assert late.recv(wait=False)["msg"] is None and net["AA"].kernel.counters["copies_missed"] == 1


@pytest.mark.parametrize("proc, why", [
    ({"start": "x", "disposition": "discard"}, "exclude each other"),
    ({"disposition": "drop"}, "disposition"),
    ({"start": "'unclosed"}, "not a command line"),
    ({"start": "x", "backoff_max": 0}, "backoff_max"),
])
def test_bad_process_configs_name_the_key(tmp_path, proc, why):
    from mccs.config import ConfigError, from_dict
    doc = {"host": {"id": "AA", "socket": "s", "checkpoint": "c", "trace_dir": "t"},
           "process": [{"name": "PRNT", **proc}]}
    with pytest.raises(ConfigError, match=why):
        from_dict(doc)
