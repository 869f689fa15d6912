"""Priorities, ping and quotas in the daemon's core, over simulated lines (mccs.testbed.hostsim): the
state machines in memory; tests/integration/test_priority_daemons.py runs the same over real daemons."""
from __future__ import annotations

import base64
import itertools
import sqlite3

import pytest

from checkpoint.store import SCHEMA_VERSION, Checkpoint
from mccs.core import envelope
from mccs.config import ProcessConfig
from mccs.testbed.hostsim import SimNet, line


def _paced(net: SimNet, a: str, b: str, baud: int) -> None:
    for side in "ab":
        net.channel(a, b).outof(side).imp.baud = baud


def test_the_envelope_carries_the_priority_in_the_top_bits_of_flags_and_an_old_reader_sees_plain_flags():
    env = envelope.Envelope(2, envelope.RECEIPT, "0a0b0c0d", 9, 30, priority=5)
    img = envelope.wrap("BBR   ", "AAP   ", 7, 1, b"hi", env)
    assert img[-15 + 2] == envelope.RECEIPT | 5 << 5  # FLAGS byte on the wire
    _, back = envelope.unwrap(img, 128)
    assert back == env and back.flags == envelope.RECEIPT
    assert envelope.unwrap(envelope.wrap("BBR   ", "AAP   ", 7, 1, b"hi", envelope.Envelope()), 128)[1].priority == 0


def test_priority_is_refused_outside_0_to_7(tmp_path):
    net = SimNet(tmp_path, {"AA": []})
    p = net.client("AA", "P")
    for bad in (8, -1, True, "7"):
        reply = p.send("AAR", b"x", priority=bad)
        assert not reply["ok"] and reply["code"] == "bad_request", reply


def test_recv_without_selection_takes_the_highest_priority_first_and_order_within_a_priority(tmp_path):
    net = SimNet(tmp_path, {"AA": []})
    p, r = net.client("AA", "P"), net.client("AA", "R")
    sent = [(b"low 1", 0), (b"mid 1", 3), (b"low 2", 0), (b"top", 7), (b"mid 2", 3)]
    for data, prio in sent:
        assert p.send("AAR", data, priority=prio)["ok"]
    got = [base64.b64decode(r.recv(wait=False)["msg"]["data"]) for _ in sent]
    assert got == [b"top", b"mid 1", b"mid 2", b"low 1", b"low 2"]


@pytest.mark.parametrize("abort", [False, True])
def test_an_urgent_message_overtakes_a_queue_on_a_paced_line_and_hops_and_all_arrive_once_in_order(tmp_path, abort):
    """With frame abort (the daemon's default; the simulator's lines leave it off unless asked) it
    also cuts short the bulk frame on the wire at each hop."""
    hosts = {"AA": [line("BB", baud=9600, frame_abort=abort)],
             "BB": [line("AA", baud=9600, frame_abort=abort), line("CC", baud=4800, frame_abort=abort)],
             "CC": [line("BB", baud=4800, frame_abort=abort)]}
    net = SimNet(tmp_path, hosts)
    _paced(net, "AA", "BB", 9600)
    _paced(net, "BB", "CC", 4800)  # slower: a queue builds up at BB too
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=60)
    p = net.client("AA", "P")
    bulk = [p.send("CCR", b"bulk %03d " % i + bytes(90))["msg_id"] for i in range(200)]
    assert net.run(lambda: len(net["BB"].kernel.lists.send) >= 20, duration=60)  # a queue at the transit host too
    t0, transit = net.now, len(net["BB"].kernel.lists.send)
    urgent = p.send("CCR", b"urgent", priority=7)["msg_id"]
    assert net.run(lambda: net["CC"].kernel.lists.recv.match("CCR   ", "", 0) is not None
                   and net["CC"].kernel.lists.recv.match("CCR   ", "", 0).msg_id == urgent, duration=30)
    waited = net.now - t0
    left = len(net["AA"].kernel.lists.send)
    assert left > 100, "the urgent message came only after most of the bulk"
    frames = (110 + 30) * 10 / 9600 + (110 + 30) * 10 / 4800  # a bulk frame on each line
    print(f"urgent across 9600 and 4800 baud, {left} queued at AA, {transit} at BB: {waited:.2f} s "
          f"(a bulk frame on each line: {frames:.3f} s)")
    assert waited < 4 * frames  # on the virtual clock: deterministic
    cuts = [net[h].kernel.lines[p].machine.counters["aborts"] for h, p in (("AA", "BB"), ("BB", "CC"))]
    print(f"frame abort {abort}: frames cut short {cuts}")
    assert (sum(cuts) >= 1 and waited < frames / 2) if abort else cuts == [0, 0]
    assert net.run(lambda: len(net["CC"].kernel.lists.recv) == 201, duration=120)
    r = net.client("CC", "R")
    got = [r.recv(wait=False)["msg"]["msg_id"] for _ in range(201)]
    assert got == [urgent, *bulk]  # the urgent first (highest priority); the bulk in order, each once
    assert net["CC"].kernel.counters["duplicates"] == 0



@pytest.mark.parametrize("baud", [115200, 9600])
def test_the_message_sender_keeps_a_short_lead_on_the_wire_and_more_frames_of_a_fast_line(tmp_path, baud):
    """The bytes handed ahead of the wire stay within the lead (URGENT_WAIT less a frame, at least
    LEAD) and a frame, what an urgent message may wait behind; on a fast line, where a frame is
    short, the lead holds several frames, so that a pass of the Message-Sender hands several."""
    from mccs.core.lines import LEAD, REFILL, URGENT_WAIT
    net = SimNet(tmp_path, {"AA": [line("BB", baud=baud)], "BB": [line("AA", baud=baud)]})
    _paced(net, "AA", "BB", baud)
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state.name == "UP", duration=30)
    p, lcb = net.client("AA", "P"), net["AA"].kernel.lines["BB"]
    for i in range(60):
        p.request({"op": "send", "to": "BBR", "data": base64.b64encode(bytes(100)).decode(), "user_id": i + 1})
    ahead = []
    while len(net["BB"].kernel.lists.recv) < 60 and net.now < 60:
        net.step()
        ahead.append(lcb.wire_free - net.now)
        if lcb.next_hand is not None:  # the Message-Sender's own pass, while the wire still has REFILL
            assert lcb.next_hand == pytest.approx(lcb.wire_free - REFILL)
    frame = lcb.frame_time  # one frame of 100 bytes and its envelope, at the baud
    lead = max(LEAD, URGENT_WAIT - frame)
    print(f"\n{baud} baud: frame {frame * 1000:.1f} ms, lead {lead * 1000:.0f} ms, "
          f"most ahead of the wire {max(ahead) * 1000:.0f} ms")
    assert len(net["BB"].kernel.lists.recv) == 60
    assert max(ahead) <= lead + frame + 1e-9  # (the first pass, before a frame showed its length, keeps LEAD)
    if baud == 115200:
        assert lead == pytest.approx(URGENT_WAIT - frame) and max(ahead) > 5 * frame  # several frames
    else:
        assert lead == LEAD and max(ahead) <= 2 * frame  # the frame on the wire and one more at most

def test_priority_and_per_priority_order_numbers_survive_a_restart(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]})
    p = net.client("AA", "P")
    p.send("BBR", b"seven", priority=7)
    p.send("BBR", b"zero")
    assert net.run(lambda: len(net["BB"].kernel.lists.recv) == 2, duration=30)
    net["BB"].crash()
    assert [b.priority for b in net["BB"].kernel.lists.recv] == [7, 0]
    assert net["BB"].kernel.pairs.into.pairs.keys() == {("AA", 7), ("AA", 0)}
    assert net["AA"].kernel.pairs.out.next == {("BB", 7): 2, ("BB", 0): 2}
    cp = net["AA"].cp.conn
    assert cp.execute("SELECT dest, priority, next FROM pair_out ORDER BY priority").fetchall() == \
        [("BB", 0, 2), ("BB", 7, 2)]


def test_a_schema_6_checkpoint_is_migrated_its_numbers_are_those_of_priority_0(tmp_path):
    path = tmp_path / "AA.db"
    Checkpoint(path, "AA").close()
    conn = sqlite3.connect(path)  # back to version 6 as it was: pair tables by host only, no priority
    with conn:
        for table in ("pair_out", "pair_in"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("CREATE TABLE pair_out (dest TEXT PRIMARY KEY, next INTEGER)")
        conn.execute("CREATE TABLE pair_in (origin TEXT PRIMARY KEY, epoch TEXT, expect INTEGER)")
        conn.execute("INSERT INTO pair_out VALUES ('BB', 17)")
        conn.execute("INSERT INTO pair_in VALUES ('CC', 'abcdef01', 9)")
        for table in ("send_list", "recv_list", "wait_list"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN priority")
        conn.execute("INSERT INTO send_list (seq, to_id, from_id, msg_id, user_id, data, ts, hops, pseq, epoch, "
                     "expires, flags, crc, text) VALUES (1, 'BBR   ', 'AAP   ', 1, 1, x'41', 0, 0, 0, '', 0, 0, 0, 0)")
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    conn.close()
    cp = Checkpoint(path, "AA")
    state = cp.restore()
    assert state.pairs_out == {("BB", 0): 17} and state.pairs_in == {("CC", 0): ("abcdef01", 9)}
    assert [r.priority for r in state.send_list] == [0]
    assert cp.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    cp.close()


def test_ping_through_a_transit_host_says_whether_the_process_is_attached(tmp_path):
    hosts = {"AA": [line("BB")], "BB": [line("AA"), line("CC")], "CC": [line("BB")]}
    net = SimNet(tmp_path, hosts)
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=60)
    admin = net.client("AA", None)
    net.client("CC", "LEDG").ask({"op": "hello", "name": "LEDG"})
    got = admin.ask({"op": "ping", "host": "CC", "name": "LEDG", "timeout": 10})
    assert got["ok"] and got["answer"] and got["host"] == "CC" and got["attached"] is True
    got = admin.ask({"op": "ping", "host": "CC", "name": "NONE", "timeout": 10})
    assert got["answer"] and got["attached"] is False
    assert not net["CC"].kernel.lists.recv and not net["AA"].kernel.lists.recv  # the daemons took them
    assert net["CC"].kernel.counters["pings_in"] == 2 and net["AA"].kernel.counters["pongs_in"] == 2
    local = admin.ask({"op": "ping", "host": "AA", "name": "P"})
    assert local["answer"] and local["attached"] is False
    for bad, code in (({"host": "A"}, "bad_id"), ({"host": "ZZ"}, "unknown_host"), ({"name": "X"}, "bad_request"),
                      ({"host": "CC", "timeout": -1}, "bad_request")):
        reply = admin.ask({"op": "ping", **bad})
        assert not reply["ok"] and reply["code"] == code, (bad, reply)


def test_a_ping_over_a_cut_line_gets_no_answer_and_its_late_pong_is_dropped(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]})
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("BB") == "BB", duration=60)
    net.channel("AA", "BB").disconnect()
    admin = net.client("AA", None)
    got = admin.ask({"op": "ping", "host": "BB", "timeout": 2})
    assert got["ok"] and got["answer"] is None
    assert not net["AA"].kernel.control.pings


def test_a_quota_holds_one_name_at_its_origin_while_the_others_flow_and_nothing_is_lost(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]},
                 processes={"BB": [ProcessConfig("LEDG", max_waiting=5)]})
    _paced(net, "AA", "BB", 9600)
    p = net.client("AA", "P")
    ledg = [p.send("BBLEDG", b"ledger %d" % i)["msg_id"] for i in range(40)]
    assert net.run(lambda: net["AA"].kernel.control.held, duration=30)
    for i in range(10):
        p.send("BBPAY", b"pay %d" % i)
    bb = net["BB"].kernel
    assert net.run(lambda: len(bb.lists.recv.boxes.get("BBPAY ", ())) == 10, duration=60)
    waiting = len(bb.lists.recv.boxes["BBLEDG"])
    assert 5 <= waiting <= 5 + 16, waiting  # the cap, and what was on the way when the hold came
    assert len(net["AA"].kernel.lists.send) >= 40 - waiting - 1  # the rest waits on the sending side
    r = net.client("BB", "LEDG")
    got = []
    while len(got) < 40:
        msg = r.recv(timeout=30)["msg"]
        assert msg is not None, f"only {len(got)} of 40 arrived"
        got.append(msg["msg_id"])
    assert got == ledg


def test_a_local_send_to_a_name_at_its_quota_waits_and_others_go_on(tmp_path):
    net = SimNet(tmp_path, {"AA": []}, processes={"AA": [ProcessConfig("LEDG", max_waiting=2)]})
    p = net.client("AA", "P")
    assert all(p.send("AALEDG", b"%d" % i)["ok"] for i in range(2))
    third = p.request({"op": "send", "to": "AALEDG", "data": "Mw=="})
    net.run(duration=1)
    assert p.reply(third) is None  # it waits on WAIT_LIST
    assert p.send("AAPAY", b"pay")["ok"]  # another name is not held up
    r = net.client("AA", "LEDG")
    assert base64.b64decode(r.recv(wait=False)["msg"]["data"]) == b"0"
    assert net.run(lambda: p.reply(third), duration=5)["ok"]
    assert [base64.b64decode(r.recv(wait=False)["msg"]["data"]) for _ in range(2)] == [b"1", b"3"]


@pytest.mark.parametrize("bad", [-1, "5", True])
def test_max_waiting_must_be_a_count(tmp_path, bad):
    from mccs.config import ConfigError, from_dict
    doc = {"host": {"id": "AA", "socket": "s", "checkpoint": "c", "trace_dir": "t"},
           "process": [{"name": "LEDG", "max_waiting": bad}]}
    with pytest.raises(ConfigError, match="max_waiting"):
        from_dict(doc)


@pytest.mark.parametrize("how", ["restart", "give back"])
def test_a_message_released_from_the_order_hold_keeps_its_place_after_a_restart_or_a_give_back(tmp_path, how):
    """PSEQ 2 arrives first (held, stored first), then 1: RECV takes 1, 2, also once the mailbox is
    rebuilt from the checkpoint or from blocks given back, which go by their place in the stream."""
    import collections

    from mccs.core.receiver import Arrival
    net = SimNet(tmp_path, {"BB": [line("AA")]})
    bb = net["BB"]
    for pseq in (2, 1):
        img = envelope.wrap("BBR   ", "AAP   ", pseq, pseq, b"m%d" % pseq, envelope.Envelope(0, 0, "0a0b0c0d", pseq))
        bb.kernel.lines.receiver.received(Arrival("AA", "async", collections.Counter()), img, True, bb.kernel._fx,
                                          net.now, net.now)
        bb.run_pass()
    if how == "restart":
        bb.crash()
    else:
        r = net.client("BB", "R")
        r.recv(confirm=False, wait=False)
        r.recv(confirm=False, wait=False)
        r.close()
        bb.run_pass()
    r = net.client("BB", "R")
    assert [base64.b64decode(r.recv(wait=False)["msg"]["data"]) for _ in range(2)] == [b"m1", b"m2"]


def test_over_a_line_that_signed_on_without_routing_nothing_overtakes_a_message_already_numbered(tmp_path):
    """A BSC announcement lost to noise brings a line up without ROUTE2: a numbered message waits
    for a routing line, and the unnumbered ones after it in its stream must wait too, or they
    arrive first (seen in test_three_hosts_mesh_noise_disconnects_and_kill9)."""
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]})
    assert net.run(lambda: net["AA"].kernel.lines["BB"].routed, duration=30)
    net.channel("AA", "BB").disconnect()
    p = net.client("AA", "P")
    first = p.send("BBR", b"first")["msg_id"]
    aa = net["AA"].kernel
    assert net.run(lambda: aa.lines["BB"].state != "UP", duration=60)  # it went numbered, unacknowledged
    p.send("BBR", b"second")
    lcb = aa.lines["BB"]
    lcb.routed = False  # as after a sign-on without ROUTE2
    assert [b.msg_id for b in aa.lists.send][0] == first and next(iter(aa.lists.send)).pseq
    assert list(itertools.islice(aa.lines._pieces(lcb, "BB", 0, net.now), 1)) == []


def test_on_a_bsc_line_turned_to_the_peer_an_urgent_message_goes_before_the_bulk_image_held(tmp_path):
    """A BSC machine takes one image at a time. Held while the line is turned to the peer (we gave it
    up by RVI, or the peer transmits), that image may wait a whole turn; an urgent message stored
    meanwhile goes before it when the line comes back (mccs.core.lines._overtakes, BscLine.send)."""
    from linedrivers import bsc_receiver
    from linedrivers.bsc_states import State
    from linedrivers.image import key_of
    net = SimNet(tmp_path, {"AA": [line("BB", protocol="bsc", baud=9600)],
                            "BB": [line("AA", protocol="bsc", role="secondary", baud=9600)]})
    _paced(net, "AA", "BB", 9600)
    m = net["AA"].kernel.lines["BB"].machine
    assert net.run(lambda: m.state is State.CONTROL, duration=30)
    p, q = net.client("AA", "P"), net.client("BB", "Q")
    for i in range(40):
        p.request({"op": "send", "to": "BBR", "data": base64.b64encode(bytes(100)).decode(), "user_id": i + 1})
    assert net.run(lambda: m.state is State.XMIT, duration=30)
    q.request({"op": "send", "to": "AAR", "data": base64.b64encode(bytes(100)).decode()})  # BB asks for the line
    assert net.run(lambda: m.state in (State.CONTROL, State.RECV) and m._queue and m._frames is None,
                   duration=10 * bsc_receiver.RVI_AFTER)
    held = m._queue[0]
    urgent = p.send("BBR", b"urgent", user_id=99, priority=7)["msg_id"]
    assert m._queue[0] != held and m._queue[1] == held  # handed beyond room(), before the image held
    r = net.client("BB", "R")
    assert net.run(lambda: len(net["BB"].kernel.lists.recv) == 41, duration=120)
    got = [r.recv(wait=False)["msg"]["user_id"] for _ in range(41)]
    assert got[0] == 99 and sorted(got[1:]) == list(range(1, 41))
    order = [t.fields["msg_id"] for t in net["BB"].traces if (t.type, t.kind) == ("msg", "received")
             and t.fields.get("origin") == "AA"]
    assert order.index(urgent) < order.index(key_of(held)[1]), order
