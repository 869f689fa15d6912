"""`mccs queue` in the daemon's core (mccs.core.queue): list, show, hold, release and purge on
kernels with real checkpoint files over simulated lines (tools/hostsim), a virtual clock."""
from __future__ import annotations

import base64
import json
import random

import pytest

from mccs.core.envelope import NOTICE

from mccs.core.lines import LineState, Recent
from mccs.core.notices import owed
from mccs.core.queue import select
from mccs.core.requests import RequestError, parse_ref
from mccs.testbed.hostsim import SimNet, line

pytestmark = pytest.mark.timeout(120)


def _queue(net: SimNet, host: str, action: str, **keys) -> dict:
    return net.client(host, None).ask({"op": "queue", "action": action, **keys})


def _entries(net: SimNet, host: str) -> dict[str, dict]:
    return {e["id"]: e for e in _queue(net, host, "list")["entries"]}


def _texts(net: SimNet, host: str, name: str = "R") -> list[bytes]:
    r, out = net.client(host, name), []
    while (got := r.recv(wait=False)["msg"]) is not None:
        out.append(base64.b64decode(got["data"]))
    r.close()
    return out


def _notice(sender, host: str) -> dict | None:
    """The notice from `host`'s daemon to the process `sender`, if one waits for it."""
    got = sender.recv(**{"from": f"{host}MCCS"}, wait=False)["msg"]
    return json.loads(base64.b64decode(got["data"])) if got else None


def test_list_and_show_tell_each_entry_of_the_three_lists(alone):
    p = alone.client("AA", "P")
    remote = p.send("BBR", b"to bb")["msg_id"]
    local = p.send("AAR", b"here", receipt=True)["msg_id"]
    alone.run(duration=3.0)
    got = _entries(alone, "AA")
    assert got[f"AA/{remote}"] == {**got[f"AA/{remote}"], "list": "SEND_LIST", "from": "AAP", "to": "BBR", "size": 5,
                                   "state": "waiting", "origin": "AA", "msg_id": remote}
    assert got[f"AA/{remote}"]["age"] == pytest.approx(3.0, abs=0.3)
    assert got[f"AA/{local}"]["list"] == "RECV_LIST" and got[f"AA/{local}"]["kind"] == "receipt"
    limited = _queue(alone, "AA", "list", limit=1)
    assert len(limited["entries"]) == 1 and limited["more"] == 1
    shown = _queue(alone, "AA", "show", msg=str(remote))["entry"]  # a bare MSG_ID: this host's own
    assert shown["preview"] == "to bb" and shown["id"] == f"AA/{remote}"
    assert _queue(alone, "AA", "show", msg=f"#{shown['seq']}")["entry"]["id"] == f"AA/{remote}"


def test_a_text_sent_after_its_request_shows_as_a_text_in_memory(alone):
    """A binary client's SEND carries its text after the request (`bin`), which the socket's
    Deframer fills in a bytearray: the core holds it as bytes like any other, so `show` does not
    take it for a large one (kept in the checkpoint only) and shows its start."""
    p = alone.client("AA", "P")
    msg_id = p.ask({"op": "send", "to": "BBR", "bin": bytearray(b"to bb, attached")})["msg_id"]
    shown = _queue(alone, "AA", "show", msg=str(msg_id))["entry"]
    assert shown["large"] is False and shown["preview"] == "to bb, attached"


def test_bad_ids_are_refused_clearly(alone):
    anon = alone.client("AA", None)
    for msg, words in (("AA/9", "no message AA/9"), ("x1", "is not ORIGIN/MSG_ID"), ("AA/0", "1 to 65535"),
                       ("#0", "at least 1")):
        reply = anon.ask({"op": "queue", "action": "show", "msg": msg})
        assert reply["code"] == "bad_id" and words in reply["error"], reply
    reply = anon.ask({"op": "queue", "action": "purge", "older_than": -1})
    assert reply["code"] == "bad_request" and "older_than" in reply["error"]
    for bad in ({"action": "purge"}, {"action": "wipe"}, {"action": 5}, {"action": "show", "msg": 12},
                {"action": "purge", "to": "A"}, {"action": "purge", "msg": "AA/1", "to": "BB"},
                {"action": "list", "limit": -1}, {"action": "purge", "older_than": True}):
        reply = anon.ask({"op": "queue", **bad})
        assert reply["code"] in ("bad_request", "bad_id") and not reply["ok"], (bad, reply)
    assert anon.ask({"op": "ping"})["ok"]


def test_an_id_on_two_lists_is_ambiguous_and_seq_names_one():
    # a transit host may hold an origin's MSG_ID twice: for a process of its own, and passing on elsewhere
    found = [({"seq": 7, "list": "RECV_LIST", "origin": "AA", "msg_id": 1}, "r"),
             ({"seq": 9, "list": "SEND_LIST", "origin": "AA", "msg_id": 1}, "s"),
             ({"seq": 3, "list": "WAIT_LIST", "origin": None, "msg_id": None}, "w")]
    with pytest.raises(RequestError, match=r"AA/1 names 2 messages \(#7 on RECV_LIST, #9 on SEND_LIST\)"):
        select(parse_ref("AA/1"), "BB", found)
    assert select(parse_ref("#9"), "BB", found)[1] == "s"
    assert select(parse_ref("#3"), "BB", found)[1] == "w"
    assert select(parse_ref("1"), "AA", found[1:])[1] == "s"  # a bare MSG_ID is this host's own
    with pytest.raises(RequestError, match="no message 1 on the lists of host BB"):
        select(parse_ref("1"), "BB", found)


def test_a_held_message_is_not_sent_until_released_and_the_others_go_by(pair):
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: bb.kernel.lines["AA"].state is LineState.UP)
    aa.port_state("BB", False, "unplugged")  # the line is down while we choose
    p = pair.client("AA", "P")
    first = p.send("BBR", b"first")["msg_id"]
    p.send("BBR", b"second")
    assert _queue(pair, "AA", "hold", msg=f"AA/{first}")["entry"]["state"] == "held"
    aa.port_state("BB", True, "")
    assert pair.run(lambda: len(bb.kernel.lists.recv), duration=30)
    pair.run(duration=5)
    assert _texts(pair, "BB") == [b"second"]
    assert _entries(pair, "AA")[f"AA/{first}"]["state"] == "held"
    assert _queue(pair, "AA", "release", msg=f"AA/{first}")["entry"]["state"] in ("waiting", "in flight")
    assert pair.run(lambda: len(bb.kernel.lists.recv), duration=30)
    assert _texts(pair, "BB") == [b"first"]


def test_a_hold_survives_a_restart(alone):
    msg_id = alone.client("AA", "P").send("BBR", b"x")["msg_id"]
    _queue(alone, "AA", "hold", msg=str(msg_id))
    alone["AA"].crash()
    assert _entries(alone, "AA")[f"AA/{msg_id}"]["state"] == "held"
    assert _queue(alone, "AA", "release", msg=str(msg_id))["note"] == ""
    alone["AA"].crash()
    assert _entries(alone, "AA")[f"AA/{msg_id}"]["state"] == "waiting"


def test_purge_by_id_destination_and_age_returns_an_undeliverable_notice(alone):
    p = alone.client("AA", "P")
    old = p.send("BBR", b"old")["msg_id"]
    alone.run(duration=100)
    new = p.send("BBR", b"new")["msg_id"]
    local = p.send("AAR", b"local")["msg_id"]
    reply = _queue(alone, "AA", "purge", older_than=50)
    assert reply["purged"] == [f"AA/{old}"] and not reply["skipped"]
    notice = _notice(p, "AA")
    assert notice["notice"] == "undeliverable" and notice["msg_id"] == old and notice["reason"] == "purged"
    assert _queue(alone, "AA", "purge", to="AA")["purged"] == [f"AA/{local}"]  # off RECV_LIST
    assert _notice(p, "AA")["msg_id"] == local
    assert _queue(alone, "AA", "purge", msg=f"AA/{new}")["purged"] == [f"AA/{new}"]
    assert _notice(p, "AA")["msg_id"] == new
    assert _entries(alone, "AA") == {}
    assert alone["AA"].cp.conn.execute("SELECT count(*) FROM send_list").fetchone()[0] == 0
    alone["AA"].crash()
    assert _entries(alone, "AA") == {}
    assert alone["AA"].kernel.ids.in_use == {}


def test_purge_of_a_send_waiting_for_a_buffer_answers_it(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")]}, buffers=1)
    p, q = net.client("AA", "P"), net.client("AA", "Q")
    p.send("BBR", b"fills the list")
    rid = q.request({"op": "send", "to": "BBR", "data": "eA==", "req": "r1"})
    net.run(duration=1)
    waiting = next(e for e in _entries(net, "AA").values() if e["list"] == "WAIT_LIST")
    assert waiting["id"].startswith("#") and waiting["msg_id"] is None
    assert _queue(net, "AA", "hold", msg=waiting["id"])["code"] == "bad_id"  # only SEND_LIST blocks are held
    assert _queue(net, "AA", "purge", msg=waiting["id"])["purged"] == [waiting["id"]]
    assert net.run(lambda: q.reply(rid))["code"] == "purged"
    assert net["AA"].cp.conn.execute("SELECT count(*) FROM wait_list").fetchone()[0] == 0


def test_a_handed_message_is_not_purged(alone):
    alone.client("AA", "P").send("AAR", b"x")
    got = alone.client("AA", "R").recv(confirm=False)["msg"]
    reply = _queue(alone, "AA", "purge", msg=f"AA/{got['msg_id']}")
    assert reply["code"] == "not_purged" and "confirm is awaited" in reply["error"]


def test_purging_a_large_message_in_transfer_corrupts_nothing(tmp_path):
    big = 4 << 20
    net = SimNet(tmp_path, {"AA": [line("BB", baud=115200)], "BB": [line("AA", baud=115200)]}, max_message=big)
    for side in "ab":  # paced like a real line: a segment is on the wire while the next is handed
        net.channel("AA", "BB").outof(side).imp.baud = 115200
    aa, bb = net["AA"], net["BB"]
    data = random.Random(1).randbytes(1 << 20)
    p = net.client("AA", "P")
    msg_id = p.send("BBR", data)["msg_id"]
    assert net.run(lambda: any(q.got > 100_000 for q in bb.kernel.reassembly.partials.values()), duration=120)
    reply = _queue(net, "AA", "purge", msg=str(msg_id))
    assert reply["pending"] == [f"AA/{msg_id}"]  # a segment is with the line: purged once it is back
    assert _entries(net, "AA")[f"AA/{msg_id}"]["state"] == "purging"
    assert net.run(lambda: not aa.kernel.lists.send, duration=30)
    # it had left with its number, so its void goes on and BB, where it never came whole, tells
    assert net.run(lambda: _notice(p, "BB"), duration=30)["msg_id"] == msg_id and _notice(p, "AA") is None
    assert aa.cp.conn.execute("SELECT count(*) FROM texts").fetchone()[0] == 0
    assert aa.cp.conn.execute("SELECT count(*) FROM send_acked").fetchone()[0] == 0
    after = p.send("BBR", b"next")["msg_id"]  # the line goes on with the next message
    assert net.run(lambda: len(bb.kernel.lists.recv), duration=60)
    got = net.client("BB", "R").recv(wait=False)["msg"]
    assert got["msg_id"] == after and base64.b64decode(got["data"]) == b"next"
    assert net.client("BB", "R2").recv(wait=False)["msg"] is None  # the purged one never arrives
    assert net.run(lambda: all(b.flags & NOTICE for b in aa.kernel.lists.send), duration=30)  # "next" acknowledged
    aa.crash()  # (what is left is the daemons' own: custody's probe, say)
    daemons = [b for b in aa.kernel.lists.send if b.flags & NOTICE]
    assert len(daemons) == len(aa.kernel.lists.send) and msg_id not in aa.kernel.ids.in_use
    assert all(lcb.transfer is None or lcb.transfer.blk.msg_id != msg_id for lcb in aa.kernel.lines.lcbs.values())


def test_holding_a_large_message_in_transfer_stops_it_and_release_resumes_it(tmp_path):
    big = 4 << 20
    net = SimNet(tmp_path, {"AA": [line("BB", baud=115200)], "BB": [line("AA", baud=115200)]}, max_message=big)
    bb = net["BB"]
    data = random.Random(2).randbytes(1 << 20)
    msg_id = net.client("AA", "P").send("BBR", data)["msg_id"]
    assert net.run(lambda: any(q.got > 100_000 for q in bb.kernel.reassembly.partials.values()), duration=120)
    _queue(net, "AA", "hold", msg=str(msg_id))
    net.run(duration=10)
    got = next(iter(bb.kernel.reassembly.partials.values())).got
    net.run(duration=20)
    assert next(iter(bb.kernel.reassembly.partials.values())).got == got < len(data)
    _queue(net, "AA", "release", msg=str(msg_id))
    assert net.run(lambda: len(bb.kernel.lists.recv), duration=300)
    assert _texts(net, "BB") == [data]


def test_status_tells_the_oldest_waiting_message_per_destination_and_line_window(alone):
    p = alone.client("AA", "P")
    first = p.send("BBR", b"a")["msg_id"]
    alone.run(duration=2)
    p.send("BBR", b"b")
    status = alone["AA"].kernel.status()
    assert status["oldest_waiting"]["BB"]["id"] == f"AA/{first}"
    assert status["lines"][0]["window"] == 8 and status["lines"][0]["retransmissions_last_minute"] == 0


def test_recent_counts_what_a_counter_grew_in_the_last_minute():
    r = Recent()
    for t, v in ((0, 0), (10, 5), (30, 7), (70, 9)):
        r.sample(t, v)
    assert r.increase(70, 9) == 4  # 9 now, 5 at t=10, the last value at or before t=10
    assert r.increase(200, 9) == 0
    assert Recent().increase(5, 3) == 0
    r.sample(71, 0)  # a fresh machine after the port was lost: never negative
    assert r.increase(71, 0) == 0


def test_a_message_the_line_holds_is_purged_when_the_line_gives_it_back(pair):
    aa = pair["AA"]
    pair.run(lambda: aa.kernel.lines["BB"].state is LineState.UP)
    del pair.hosts["BB"]  # BB falls silent: what AA hands its line stays unacknowledged
    p = pair.client("AA", "P")
    kept, purged = p.send("BBR", b"kept")["msg_id"], p.send("BBR", b"purged")["msg_id"]
    assert pair.run(lambda: all(aa.kernel.lines.carrying(b) for b in aa.kernel.lists.send), duration=5)
    assert _queue(pair, "AA", "purge", msg=str(kept))["pending"] == [f"AA/{kept}"]
    assert _queue(pair, "AA", "release", msg=str(kept))["note"].startswith("its purge")  # called off
    assert _queue(pair, "AA", "purge", msg=str(purged))["pending"] == [f"AA/{purged}"]
    assert _entries(pair, "AA")[f"AA/{purged}"]["state"] == "purging"
    assert _queue(pair, "AA", "purge", msg=str(purged))["code"] == "not_purged"
    assert pair.run(lambda: aa.kernel.lines["BB"].state is not LineState.UP, duration=60)
    left = _entries(pair, "AA")
    assert left[f"AA/{kept}"]["state"] == "waiting" and left[f"AA/{kept}"]["size"] == 4
    # it had left on a routing line with its end-to-end number, so BB may have it: a void keeps its
    # place for BB's order and owes the notice, which BB makes if the message never came there
    assert left[f"AA/{purged}"]["kind"] == "void" and _notice(p, "AA") is None
    void = next(b for b in aa.kernel.lists.send if b.msg_id == purged)
    assert owed(void) == "purged" and void.expires > 0  # told here if BB does not take it within a ttl
