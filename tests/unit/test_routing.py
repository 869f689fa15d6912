"""Multi-hop routing in memory (issue 11): the routing table alone, then kernels joined by
simulated async lines with a virtual clock (tools/hostsim)."""
from __future__ import annotations

import pytest

from mccs.config import RouteConfig
from mccs.core.pairs import PairsIn, Verdict
from mccs.core.lists import MSGBLOK
from mccs.core.routing import NO_ROUTE, Heard, RoutingTable, decode_sequenced, decode_vector
from mccs.testbed.hostsim import SimNet, line

pytestmark = pytest.mark.timeout(120)


# -- the table ---------------------------------------------------------------------------------------
def test_distance_vector_learns_prefers_the_shorter_path_and_poisons_the_reverse():
    """Version 1 (a peer that offered ROUTE2 alone): plain distances, 16 is none."""
    t = RoutingTable("AA", ["BB", "DD"], {}, learn=True)
    t.line_up("BB", 0)
    t.line_up("DD", 0)
    t.advert("BB", b"BB=0 CC=1 DD=2", 1)
    t.advert("DD", b"DD=0 CC=1 EE=3", 1)
    assert (t.next_hop("CC"), t.best["CC"].dist) == ("BB", 2)  # a tie keeps the first route, then the lower id
    assert t.next_hop("EE") == "DD" and t.best["EE"].dist == 4
    assert "EE=16" in t.news_for("DD")  # poisoned reverse: EE is reached through DD
    assert {"EE=4", "AA=0"} <= set(t.news_for("BB")) and t.news_for("BB") == []  # told once
    t.line_down("BB", 2)
    assert t.next_hop("CC") == "DD" and t.next_hop("BB") == "BB"  # the neighbour's messages wait for its line
    assert not t.best["BB"].reachable


def test_sequenced_updates_carry_the_source_number_and_take_only_feasible_routes():
    """SEQROUTE (docs/ROUTING.md 3a): a route is taken only if newer than, or as new and shorter
    than, the best this host chose; with none left it withdraws and asks the source for a newer
    number, along the way its neighbour knows, and the source's answer is taken."""
    t = RoutingTable("AA", ["BB", "DD"], {}, learn=True)
    for peer in ("BB", "DD"):
        t.line_up(peer, 0, True, True)
        assert t.news_for(peer) == ["AA=0/0"]  # (the neighbours are told once they tell their numbers)
    t.advert("BB", b"BB=0/4 CC=1/9", 1)
    t.advert("DD", b"DD=0/2 CC=3/9", 1)
    assert (t.next_hop("CC"), t.best["CC"].dist, t.best["CC"].seq) == ("BB", 2, 9)
    assert t.news_for("DD") == ["BB=1/4", "CC=2/9"] and t.news_for("BB") == ["DD=1/2"]  # CC: nothing to withdraw
    t.advert("BB", b"CC=-", 2)  # BB lost CC; DD's 3 is longer than the 2 chosen at number 9: not feasible
    assert t.next_hop("CC") is None and t.news_for("DD") == ["CC=-", "?CC/10"]
    t.advert("BB", b"?DD/3", 2)  # BB asks for DD: passed on to DD, the source
    assert t.news_for("DD") == ["?DD/3"]
    t.advert("DD", b"CC=3/10", 3)  # CC answered: newer, so feasible however long
    assert (t.next_hop("CC"), t.best["CC"].dist) == ("DD", 4)
    assert t.news_for("BB") == ["CC=4/10"]
    t.advert("DD", b"?AA/7", 4)  # asked of this host: its number moves on
    assert t.seq == 7 and t.news_for("DD") == ["AA=0/7"] and t.news_for("BB") == []  # a number alone: to the asker


def test_a_question_for_an_older_number_does_not_replace_one_for_a_newer():
    """Found by the property test: AC asks AO for AM's number 2, then (for another asker) for 1.
    AO passes both on; AM answers 1, then 2. AO owes AC the 2: it must tell it, though a newer
    number alone is news only to those that asked (a question for 1 had replaced the one for 2,
    so AC, and its asker behind it, waited for ever on a longer route)."""
    ao = RoutingTable("AO", ["AC", "AM"], {}, True)
    for peer in ("AC", "AM"):
        ao.line_up(peer, 0.0, True, True)
    ao.advert("AM", b"AM=0/0", 0.0)
    ao.news_for("AC")
    ao.news_for("AM")
    ao.advert("AC", b"?AM/2", 0.0)
    assert ao.news_for("AM") == ["?AM/2"]
    ao.advert("AC", b"?AM/1", 0.0)
    assert ao.news_for("AM") == ["?AM/1"]  # (passed on too; the 2 is still owed to AC)
    ao.advert("AM", b"AM=0/1", 0.0)
    assert ao.news_for("AC") == []
    ao.advert("AM", b"AM=0/2", 0.0)
    assert ao.news_for("AC") == ["AM=1/2"]


def test_a_version_1_peers_routes_are_spoken_for_on_sequenced_lines():
    """BB speaks version 1, DD sequenced: AA tells DD of what BB reaches under its own numbers."""
    t = RoutingTable("AA", ["BB", "DD"], {}, learn=True)
    t.line_up("BB", 0)
    t.line_up("DD", 0, True, True)
    t.advert("BB", b"BB=0 CC=1", 0)
    assert set(t.news_for("DD")) == {"AA=0/0", "BB=1/0@AA", "CC=2/0@AA"}
    t.advert("DD", b"?CC/1@AA", 1)
    assert t.news_for("DD") == ["CC=2/1@AA"]


def test_static_routes_win_and_a_default_route_catches_the_rest():
    t = RoutingTable("AA", ["BB", "CC"], {"DD": "CC", "*": "BB"}, learn=True, known=["EE"])
    t.line_up("BB", 0)
    t.line_up("CC", 0)
    t.advert("BB", b"DD=1", 0)
    assert t.next_hop("DD") == "CC"  # static beats learned
    assert t.next_hop("EE") == "BB" and t.is_known("ZZ")  # the default route accepts any host
    static = RoutingTable("AA", ["BB"], {}, learn=False)
    static.line_up("BB", 0)
    assert static.advert("BB", b"DD=1", 0) == [] and not static.is_known("DD")


def test_updates_on_the_wire_and_bad_ones_refused():
    assert decode_vector(b"AA=0 DD=16") == {"AA": 0, "DD": 16}
    for bad in (b"AAA=1", b"AA=x", b"AA", b"\xff=1"):
        with pytest.raises((ValueError, UnicodeDecodeError)):
            decode_vector(bad)
    said, asks = decode_sequenced(b"AA=0/65535 BB=3/7@CC DD=- ?EE/8 ?FF/9@GG")
    assert said == {"AA": Heard(0, 65535, "AA"), "BB": Heard(3, 7, "CC"), "DD": Heard(NO_ROUTE, None, "DD")}
    assert asks == {("EE", "EE"): 8, ("FF", "GG"): 9}
    for bad in (b"AA=1", b"AA=0/65536", b"AA=65535/1", b"?AA", b"AAA=1/1", b"AA=1/1@CCC", b"\xff=1/1"):
        with pytest.raises((ValueError, UnicodeDecodeError)):
            decode_sequenced(bad)


def test_end_to_end_numbers_hold_back_overtakers_and_drop_copies():
    into = PairsIn({})

    def blk(pseq, epoch="e1"):
        return MSGBLOK(pseq, "DDR   ", "AAS   ", pseq, 0, b"", 0.0, 1, pseq, epoch)
    assert into.arrive(blk(2))[0] is Verdict.HELD
    verdict, ready, changes = into.arrive(blk(1))
    assert verdict is Verdict.DELIVER and [b.pseq for b in ready] == [1, 2] and changes
    assert into.arrive(blk(2))[0] is Verdict.DUPLICATE and into.arrive(blk(1))[0] is Verdict.DUPLICATE
    assert into.arrive(blk(1, "e2"))[0] is Verdict.DELIVER  # a new epoch of the origin starts again


# -- kernels on simulated lines ---------------------------------------------------------------------
def _net(tmp_path, links: list[str], **keys) -> SimNet:
    hosts: dict[str, list] = {}
    for link in links:
        a, b = link.split("-")
        hosts.setdefault(a, []).append(line(b))
        hosts.setdefault(b, []).append(line(a))
    return SimNet(tmp_path, hosts, **keys)


def _routes_converged(net: SimNet) -> bool:
    return all(h.kernel.routes.next_hop(o) is not None and h.kernel.routes.best[o].reachable
               for h in net.hosts.values() for o in net.hosts if o != h.id)


def _drain(client, n: int, net: SimNet) -> list[bytes]:
    got = []
    for _ in range(n):
        reply = client.recv(timeout=30)
        assert reply["msg"] is not None, f"only {len(got)} of {n} arrived"
        got.append(reply["msg"]["data"])
    return got


def test_a_chain_learns_every_host_and_carries_both_ways_in_order(tmp_path):
    net = _net(tmp_path, ["AA-BB", "BB-CC", "CC-DD"])
    assert net.run(lambda: _routes_converged(net), duration=30)
    assert net["AA"].kernel.routes.best["DD"].dist == 3
    src_a, src_d = net.client("AA", "S"), net.client("DD", "S")
    for i in range(20):
        src_a.send("DDR", b"a%d" % i)
        src_d.send("AAR", b"d%d" % i)
    import base64
    at_d = [base64.b64decode(x) for x in _drain(net.client("DD", "R"), 20, net)]
    at_a = [base64.b64decode(x) for x in _drain(net.client("AA", "R"), 20, net)]
    assert at_d == [b"a%d" % i for i in range(20)] and at_a == [b"d%d" % i for i in range(20)]
    assert net["BB"].kernel.counters["forwarded"] >= 40 and net["CC"].kernel.counters["forwarded"] >= 40
    assert net.run(lambda: all(len(h.kernel.lists.send) == 0 for h in net.hosts.values()), duration=30)


def test_a_transit_host_crashing_mid_traffic_loses_and_doubles_nothing(tmp_path):
    import base64
    net = _net(tmp_path, ["AA-BB", "BB-CC", "CC-DD"])
    assert net.run(lambda: _routes_converged(net), duration=30)
    src = net.client("AA", "S")
    for i in range(30):
        src.send("DDR", b"%d" % i)
        if i in (8, 19):
            net["CC"].crash()  # kill -9: whatever CC acknowledged is in its checkpoint
    got = [base64.b64decode(x) for x in _drain(net.client("DD", "R"), 30, net)]
    assert got == [b"%d" % i for i in range(30)]
    assert net.client("DD", "R2").recv(wait=False)["msg"] is None


def test_a_ring_routes_around_a_cut_line_and_back(tmp_path):
    import base64
    net = _net(tmp_path, ["AA-BB", "BB-CC", "CC-DD", "DD-AA"])
    assert net.run(lambda: _routes_converged(net), duration=30)
    assert net["AA"].kernel.routes.next_hop("BB") == "BB"
    src, dst = net.client("AA", "S"), net.client("BB", "R")
    for i in range(5):
        src.send("BBR", b"%d" % i)
    net.channel("AA", "BB").disconnect()
    for i in range(5, 15):
        src.send("BBR", b"%d" % i)
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("BB") == "DD", duration=60)
    got = [base64.b64decode(x) for x in _drain(dst, 15, net)]
    assert got == [b"%d" % i for i in range(15)]
    net.channel("AA", "BB").reconnect()
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("BB") == "BB", duration=60)


def test_unknown_hosts_are_refused_and_a_static_loop_ends_at_the_hop_limit(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]}, routing="static", hop_limit=4)
    net["AA"].cfg.routes.append(RouteConfig("ZZ", "BB"))
    net["BB"].cfg.routes.append(RouteConfig("ZZ", "AA"))
    for hid in ("AA", "BB"):
        net[hid].crash()  # restart with the routes
    assert net.client("AA", "S").send("QQR", b"x")["code"] == "unknown_host"
    src = net.client("AA", "S2")
    msg_id = src.send("ZZR", b"loop")["msg_id"]
    n = _notice(src.recv(timeout=30))
    assert (n["notice"], n["msg_id"]) == ("undeliverable", msg_id) and n["reason"] == "hop limit"
    parked = lambda: sum(h.kernel.counters["voids_parked"] for h in net.hosts.values())  # noqa: E731
    assert net.run(parked, duration=30)  # the message, then its void met the limit: the void waits
    limits = net["AA"].kernel.counters["hop_limit"] + net["BB"].kernel.counters["hop_limit"]
    assert limits == 2 and src.recv(wait=False)["msg"] is None  # one notice
    assert sum(len(h.kernel.lists.send) for h in net.hosts.values()) == 1


def test_a_void_waits_out_a_routing_loop_and_its_successors_are_delivered_once_the_loop_is_mended(tmp_path):
    import base64
    net = _net(tmp_path, ["AA-BB", "BB-CC"], routing="static", hop_limit=4)
    net["BB"].cfg.routes.append(RouteConfig("CC", "AA"))  # a mistake: BB sends CC's messages back
    net["AA"].cfg.routes.append(RouteConfig("CC", "BB"))
    for hid in ("AA", "BB"):
        net[hid].crash()
    src = net.client("AA", "S")
    src.send("CCR", b"lost in the loop")
    assert _notice(src.recv(timeout=30))["notice"] == "undeliverable"
    assert net.run(lambda: net["AA"].kernel.counters["voids_parked"] + net["BB"].kernel.counters["voids_parked"],
                   duration=30)
    net["BB"].cfg.routes.clear()  # mended: CC is BB's neighbour
    net["BB"].crash()
    src.send("CCR", b"after the repair")
    got = _drain(net.client("CC", "R"), 1, net)  # the void went on (within VOID_RETRY) and did not hold it
    assert base64.b64decode(got[0]) == b"after the repair"
    assert net.run(lambda: all(len(h.kernel.lists.send) == 0 for h in net.hosts.values()), duration=120)
    assert net["CC"].kernel.counters["voids"] == 1


def test_the_send_list_forgets_the_expiry_of_blocks_that_left():
    from mccs.core.lists import SendList
    sl = SendList()
    blks = [MSGBLOK(i, "BBR   ", "AAS   ", i, 0, b"x" * 100, 0.0, expires=1e9) for i in range(1, 5001)]
    for b in blks:
        sl.add(b)
    for b in blks[:4990]:
        sl.remove(b)
    assert len(sl._expiring) <= 2 * len(sl) + 1024  # not one entry (and block) per message that left
    assert [b.seq for b in sl.expired(2e9)] == [b.seq for b in blks[4990:]]


def test_a_peer_without_route_signs_on_and_carries_direct_traffic_only(tmp_path):
    """BB speaks docs/DESIGN.md's version 1 (no FEAT in its sign-on): AA and CC reach it directly,
    but cannot route through it, and say so at once."""
    import base64
    net = _net(tmp_path, ["AA-BB", "BB-CC"])
    _older(net, "BB", selective_repeat=False)
    assert net.run(lambda: all(h.kernel.lines[p].state == "UP" for h, p in ((net["AA"], "BB"), (net["CC"], "BB"))))
    assert not net["AA"].kernel.lines["BB"].routed
    assert net.client("AA", "S").send("CCR", b"x")["code"] == "unknown_host"
    s = net.client("AA", "S2")
    for i in range(5):
        assert s.send("BBR", b"%d" % i)["ok"]
    got = [base64.b64decode(x) for x in _drain(net.client("BB", "R"), 5, net)]
    assert got == [b"%d" % i for i in range(5)]


def _older(net: SimNet, host: str, **line_keys) -> None:
    """`host` restarted as an earlier MCCS: its async lines offer what `line_keys` say (no FEAT at all
    by default, docs/DESIGN.md's version 1)."""
    from checkpoint.store import Checkpoint
    from linedrivers import AsyncLine
    from mccs.core.kernel import Kernel
    h = net[host]
    h.cp.close()
    h.cp = Checkpoint(h.cfg.checkpoint, host, "off")
    h.kernel = Kernel(h.cfg, h.cp.restore(), lambda lc: AsyncLine(host, lc.peer, reply_timeout=lc.reply_timeout,
                                                                  keepalive=lc.keepalive, **line_keys))
    h.open_ports()


def test_a_host_of_version_1_routing_carries_between_sequenced_ones_within_15_lines(tmp_path):
    """BB routes as the release before (ROUTE2 without SEQROUTE) between AA and CC, which speak for
    the hosts BB reaches to DD under their own numbers: every host reaches every other, both ways, in order."""
    import base64

    from mccs.core import segments
    from mccs.core.machine import ROUTE
    net = _net(tmp_path, ["AA-BB", "BB-CC", "CC-DD"])
    _older(net, "BB", features=(ROUTE, segments.FORGET), max_message=128 + 28)
    assert net.run(lambda: _routes_converged(net), duration=60)
    assert not net["CC"].kernel.lines["BB"].features.count("SEQROUTE") and "SEQROUTE" in net["CC"].kernel.lines[
        "DD"].features
    assert net["DD"].kernel.routes.best["AA"].dist == 3
    src_a, src_d = net.client("AA", "S"), net.client("DD", "S")
    for i in range(10):
        src_a.send("DDR", b"a%d" % i)
        src_d.send("AAR", b"d%d" % i)
    assert [base64.b64decode(x) for x in _drain(net.client("DD", "R"), 10, net)] == [b"a%d" % i for i in range(10)]
    assert [base64.b64decode(x) for x in _drain(net.client("AA", "R"), 10, net)] == [b"d%d" % i for i in range(10)]


def test_a_numbered_message_is_not_overtaken_when_its_line_comes_back_without_routing(tmp_path):
    """AA numbers m1 for BB on a routed line; BB crashes before storing it and comes back as a
    version-1 peer (a BSC announcement lost to noise does the same). m1 may go only with its number,
    so m2 must not pass it without one: nothing arrives until the line routes again, then m1, m2."""
    import base64

    from checkpoint.changes import Table
    from linedrivers import AsyncLine
    from mccs.core.kernel import Kernel
    net = _net(tmp_path, ["AA-BB"])
    aa, bb = net["AA"], net["BB"]
    assert net.run(lambda: bb.kernel.lines["AA"].routed)
    bb.crash_when = lambda fx: any(c.sql.startswith(f"INSERT INTO {Table.RECV_LIST} ") for c in fx.changes)
    s = net.client("AA", "S")
    assert s.send("BBR", b"m1")["ok"]
    assert net.run(lambda: bb.crash_when is None)
    bb.kernel = Kernel(bb.cfg, bb.cp.restore(), lambda lc: AsyncLine("BB", lc.peer, reply_timeout=lc.reply_timeout,
                                                                     keepalive=lc.keepalive, selective_repeat=False))
    bb.open_ports()
    assert net.run(lambda: aa.kernel.lines["BB"].counters["signed_on_again"] == 3)  # a lost announcement?
    assert net.run(lambda: aa.kernel.lines["BB"].state == "UP" and not aa.kernel.lines["BB"].routed)
    assert s.send("BBR", b"m2")["ok"]
    r = net.client("BB", "R")
    assert r.recv(timeout=20)["msg"] is None  # m2 waits behind m1
    bb.crash()  # back as today's MCCS: the line routes again
    r = net.client("BB", "R")
    assert [base64.b64decode(x) for x in _drain(r, 2, net)] == [b"m1", b"m2"]


# -- expiry, notices, receipts ----------------------------------------------------------------------
def _notice(reply: dict) -> dict:
    """The notice a RECV got: its JSON text, with the FROM_ID and USER_ID it came under."""
    import base64
    import json
    msg = reply["msg"]
    assert msg is not None, "no notice came"
    return {**json.loads(base64.b64decode(msg["data"])), "from_id": msg["from_id"].rstrip(), "user_id": msg["user_id"]}


def test_a_message_that_outlives_its_ttl_at_a_transit_host_comes_back_undeliverable(tmp_path):
    import base64
    net = _net(tmp_path, ["AA-BB", "BB-CC"])
    assert net.run(lambda: _routes_converged(net), duration=30)
    net.channel("BB", "CC").disconnect()  # CC is away for longer than the message may wait
    src = net.client("AA", "S")
    msg_id = src.send("CCR", b"late", ttl=5)["msg_id"]
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"], duration=10)
    assert net.run(lambda: net["BB"].kernel.counters["expired"], duration=60)  # once its ttl passed at BB
    assert src.recv(timeout=5)["msg"] is None  # no notice from BB: a copy may have reached CC before the cut
    net.channel("BB", "CC").reconnect()
    n = _notice(src.recv(from_id="CCMCCS", timeout=60))  # CC, where its void took its place, tells
    assert (n["notice"], n["msg_id"], n["user_id"], n["to_id"].rstrip()) == ("undeliverable", msg_id, msg_id, "CCR")
    assert n["reason"] == "ttl" and n["from_id"] == "CCMCCS"
    src.send("CCR", b"after")
    dst = net.client("CC", "R")
    assert base64.b64decode(_drain(dst, 1, net)[0]) == b"after"  # the void kept its place: nothing waits for it
    assert dst.recv(wait=False)["msg"] is None and net["CC"].kernel.counters["voids"] == 1
    assert net.run(lambda: all(len(h.kernel.lists.send) == 0 for h in net.hosts.values()), duration=30)


def test_a_message_that_cannot_leave_its_origin_in_time_is_returned_by_its_own_host(tmp_path):
    net = _net(tmp_path, ["AA-BB"])
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state == "UP", duration=10)
    net.channel("AA", "BB").disconnect()
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state == "DOWN", duration=60)
    src = net.client("AA", "S")
    msg_id = src.send("BBR", b"x", ttl=2)["msg_id"]
    n = _notice(src.recv(timeout=10))
    assert (n["notice"], n["msg_id"], n["from_id"]) == ("undeliverable", msg_id, "AAMCCS")
    net.channel("AA", "BB").reconnect()
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state == "UP", duration=30)
    assert net.client("BB", "R").recv(timeout=5)["msg"] is None  # never delivered after it was returned


def test_receipts_come_back_across_three_hops_through_a_crash_of_a_transit_host(tmp_path):
    net = _net(tmp_path, ["AA-BB", "BB-CC", "CC-DD"])
    assert net.run(lambda: _routes_converged(net), duration=30)
    src = net.client("AA", "S")
    ids = [src.send("DDR", b"%d" % i, receipt=True)["msg_id"] for i in range(3)]
    src.send("DDR", b"no receipt")
    dst = net.client("DD", "R")
    for _ in range(4):
        assert dst.recv(timeout=30)["msg"] is not None
        net["CC"].crash()  # kill -9 of the transit host while the receipts travel back
    notices = [_notice(src.recv(from_id="DDMCCS", timeout=30)) for _ in ids]
    assert [(n["notice"], n["msg_id"]) for n in notices] == [("delivered", i) for i in ids]
    assert all(n["reason"] == "taken" and n["to_id"].rstrip() == "DDR" for n in notices)
    assert src.recv(timeout=5)["msg"] is None  # no receipt unasked, no notice twice


def test_a_receipt_for_a_local_message_and_the_daemons_name_is_its_own(tmp_path):
    net = _net(tmp_path, ["AA-BB"])
    src = net.client("AA", "S")
    msg_id = src.send("AAR", b"here", receipt=True)["msg_id"]
    assert net.client("AA", "R").recv(timeout=5)["msg"]["msg_id"] == msg_id
    n = _notice(src.recv(timeout=5))
    assert (n["notice"], n["msg_id"], n["from_id"]) == ("delivered", msg_id, "AAMCCS")
    assert net.client("AA", None).ask({"op": "hello", "name": "MCCS"})["code"] == "not_permitted"


def test_a_notice_that_cannot_get_back_expires_without_a_notice_of_its_own(tmp_path):
    net = _net(tmp_path, ["AA-BB", "BB-CC"], ttl=3)
    assert net.run(lambda: _routes_converged(net), duration=30)
    net.channel("BB", "CC").disconnect()
    src = net.client("AA", "S")
    src.send("CCR", b"x")
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"], duration=10)
    net.channel("AA", "BB").disconnect()
    assert net.run(lambda: net["BB"].kernel.counters["expired"] == 2, duration=120)  # the message, then its notice
    assert net["BB"].kernel.counters["notices"] == 1
    net.channel("AA", "BB").reconnect()
    net.channel("BB", "CC").reconnect()  # the voids travel on and fill their places
    assert net.run(lambda: all(len(h.kernel.lists.send) == 0 for h in net.hosts.values()), duration=120)
    assert net.client("CC", "R").recv(wait=False)["msg"] is None and src.recv(wait=False)["msg"] is None


# -- issue 32, item 1: what a daemon makes fits every line; what a next host cannot take stops nothing --
def test_every_notice_and_control_message_a_daemon_makes_fits_the_room_every_line_takes():
    import json

    from mccs.core.notices import DAEMON_ROOM, REASONS, notice_text
    far_future = 4102444800.999  # 2100-01-01: the longest wall clock a notice carries this century
    longest = max(len(notice_text(kind, 65535, "ZZWXYZ", code, far_future))
                  for kind in ("delivered", "undeliverable") for code in REASONS)
    controls = [{"pong": "WXYZ", "attached": False}, {"ping": "WXYZ"}, {"hold": "WXYZ"}, {"release": "WXYZ"}]
    assert longest <= DAEMON_ROOM and all(len(json.dumps(c)) <= DAEMON_ROOM for c in controls)
    assert DAEMON_ROOM <= 128  # the default max_message: an older peer with the default takes them too


def test_a_ttl_expiry_at_a_transit_host_is_told_and_stops_nothing_with_every_default(tmp_path):
    """The adversarial test's chain: AA-BB-CC, BB-CC cut, a message with ttl 2 expires at BB; the
    notice reaches AA and the messages sent after it reach CC (the notice was over 128 bytes)."""
    import base64
    net = _net(tmp_path, ["AA-BB", "BB-CC"])
    assert net.run(lambda: _routes_converged(net), duration=30)
    net.channel("BB", "CC").disconnect()
    src, dst = net.client("AA", "S"), net.client("CC", "R")
    late = src.send("CCR", b"late", ttl=2, receipt=True)["msg_id"]
    assert net.run(lambda: net["BB"].kernel.counters["expired"], duration=60)
    net.channel("BB", "CC").reconnect()
    n = _notice(src.recv(from_id="CCMCCS", timeout=60))  # its void took its place at CC
    assert (n["notice"], n["msg_id"], n["reason"]) == ("undeliverable", late, "ttl")
    for i in range(6):
        src.send("CCR", b"%d" % i, receipt=True)
    assert [base64.b64decode(x) for x in _drain(dst, 6, net)] == [b"%d" % i for i in range(6)]
    assert sorted(_notice(src.recv(from_id="CCMCCS", timeout=30))["reason"] for _ in range(6)) == ["taken"] * 6
    assert net.run(lambda: all(len(h.kernel.lists.send) == 0 for h in net.hosts.values()), duration=30)
    assert not any(lcb.counters["too_large"] for h in net.hosts.values() for lcb in h.kernel.lines.lcbs.values())


def test_a_message_the_next_host_cannot_take_is_returned_after_too_large_wait_and_the_rest_go(tmp_path):
    """With the default too_large_wait: AA (max_message 1000) sends BB (the default, 128) a message
    of 500 bytes, then three short ones. The long one waits 300 s, comes back undeliverable
    (reason "too large", counted), and the three are delivered in order."""
    import base64

    from mccs.config import TOO_LARGE_WAIT
    net = _net(tmp_path, ["AA-BB"])
    net["AA"].cfg.max_message = 1000
    net["AA"].crash()  # restarted with its new max_message
    src, dst = net.client("AA", "S"), net.client("BB", "R")
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state == "UP", duration=10)
    big = src.send("BBR", b"x" * 500)["msg_id"]
    for i in range(3):
        src.send("BBR", b"%d" % i)
    lcb = net["AA"].kernel.lines["BB"]
    assert net.run(lambda: lcb.held, duration=10) and lcb.counters["too_large"] == 1
    net.run(duration=TOO_LARGE_WAIT - 5)
    assert len(net["BB"].kernel.lists.recv) == 0 and lcb.held  # nothing passed it meanwhile
    n = _notice(src.recv(timeout=30))
    assert (n["notice"], n["msg_id"], n["reason"], n["from_id"]) == ("undeliverable", big, "too large", "AAMCCS")
    assert [base64.b64decode(x) for x in _drain(dst, 3, net)] == [b"0", b"1", b"2"]
    assert lcb.counters["too_large_returned"] == 1 and net["AA"].kernel.counters["too large"] == 1
    assert lcb.held is None and len(net["AA"].kernel.lists.send) == 0


def test_a_host_with_a_small_max_message_still_takes_and_passes_on_notices(tmp_path):
    """max_message 64 at every host: a notice (about 100 bytes) still crosses every line."""
    net = _net(tmp_path, ["AA-BB", "BB-CC"], max_message=64)
    assert net.run(lambda: _routes_converged(net), duration=30)
    src = net.client("AA", "S")
    ids = [src.send("CCR", b"%d" % i, receipt=True)["msg_id"] for i in range(3)]
    dst = net.client("CC", "R")
    assert len(_drain(dst, 3, net)) == 3
    notices = [_notice(src.recv(from_id="CCMCCS", timeout=30)) for _ in ids]
    assert sorted(n["msg_id"] for n in notices) == sorted(ids) and {n["reason"] for n in notices} == {"taken"}
    assert not any(lcb.counters["too_large"] for h in net.hosts.values() for lcb in h.kernel.lines.lcbs.values())


def test_a_message_delivered_whose_acknowledgement_was_lost_is_never_also_returned(tmp_path):
    """AA's message reaches BB and is delivered, but BB's acknowledgement is lost (its way back is
    cut): AA's copy passes its ttl. Its void goes to BB, which had the message: no notice, ever."""
    net = _net(tmp_path, ["AA-BB"])
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state == "UP", duration=10)
    net.channel("AA", "BB").towards("a").connected = False  # what BB writes to AA is lost
    src, dst = net.client("AA", "S"), net.client("BB", "R")
    msg_id = src.send("BBR", b"once", ttl=3, receipt=True)["msg_id"]
    assert dst.recv(timeout=10)["msg"]["msg_id"] == msg_id
    assert net.run(lambda: net["AA"].kernel.counters["expired"], duration=120)  # AA never heard: it gave up
    net.channel("AA", "BB").towards("a").connected = True
    assert net.run(lambda: not net["AA"].kernel.lists.send, duration=120)  # the void went, BB dropped it
    got = [_notice(src.recv(timeout=30))]
    assert [(n["notice"], n["msg_id"]) for n in got] == [("delivered", msg_id)]  # its receipt, nothing else
    assert src.recv(timeout=30)["msg"] is None and net["BB"].kernel.counters["returned_by_void"] == 0


def test_a_void_that_cannot_reach_its_destination_within_a_further_ttl_is_told_where_it_waits(tmp_path):
    """The destination stays away: the void's own ttl (the host's) passes at the transit host,
    which makes the notice then, once; the void keeps its place for when the destination returns."""
    net = _net(tmp_path, ["AA-BB", "BB-CC"], ttl=20)
    assert net.run(lambda: _routes_converged(net), duration=30)
    net.channel("BB", "CC").disconnect()
    src = net.client("AA", "S")
    msg_id = src.send("CCR", b"away", ttl=2)["msg_id"]
    n = _notice(src.recv(timeout=60))  # after its ttl (2 s), then its void's (the host's, 20 s)
    assert (n["notice"], n["msg_id"], n["reason"], n["from_id"]) == ("undeliverable", msg_id, "ttl", "BBMCCS")
    net.channel("BB", "CC").reconnect()
    assert net.run(lambda: all(len(h.kernel.lists.send) == 0 for h in net.hosts.values()), duration=60)
    assert net["CC"].kernel.counters["voids"] == 1 and src.recv(timeout=10)["msg"] is None  # told once


def test_a_neighbour_on_a_line_that_is_a_call_is_a_route_between_calls_at_a_cost():
    """AA has a leased line to CC and a call line to BB; both reach DD. Before any call BB itself is
    reachable (at 1 + CALL_COST); after a call BB's word stands while the line is down between calls,
    and the leased path to DD is preferred while it is as short."""
    from mccs.core.routing import CALL_COST
    rt = RoutingTable("AA", ["BB", "CC"], {}, True, calls=["BB"])
    rt.line_up("CC", 0.0, True, True)
    assert rt.next_hop("BB") == "BB" and f"BB={1 + CALL_COST}/0@AA" in rt.news_for("CC")  # spoken for till it speaks
    rt.line_up("BB", 1.0, True, True)
    rt.advert("BB", b"BB=0/5 DD=1/3", 1.0)
    rt.line_down("BB", 2.0)  # the call ended
    assert rt.next_hop("DD") == "BB" and set(rt.news_for("CC")) == {f"BB={1 + CALL_COST}/5", f"DD={2 + CALL_COST}/3"}
    rt.advert("CC", b"CC=0/0 DD=1/3", 3.0)
    assert rt.next_hop("DD") == "CC"  # 2 by the leased line against 2 + CALL_COST by the call


def test_a_question_lost_with_a_line_is_passed_on_to_the_new_next_hop():
    """BB passed AA's question for DD's number on to CC; the line to CC goes down before CC had
    it: BB's route moves to EE, and the question goes on to EE. Once EE tells a number as new, AA
    is told it."""
    t = RoutingTable("BB", ["AA", "CC", "EE"], {}, learn=True)
    for peer in ("AA", "CC", "EE"):
        t.line_up(peer, 0, True, True)
    t.advert("CC", b"CC=0/0 DD=1/0", 0)
    t.advert("EE", b"EE=0/0 DD=1/0", 0)
    assert t.next_hop("DD") == "CC"  # (as short: the lower id)
    t.news_for("AA"), t.news_for("CC"), t.news_for("EE")
    t.advert("AA", b"?DD/1", 1)
    assert t.news_for("CC") == ["?DD/1"]
    t.line_down("CC", 2)  # the question is lost with the line
    assert t.next_hop("DD") == "EE" and "?DD/1" in t.news_for("EE")
    t.advert("EE", b"DD=1/1", 3)
    assert "DD=2/1" in t.news_for("AA")


def test_a_question_for_a_host_not_spoken_for_is_ignored_and_an_entry_come_round_is_none():
    """A neighbour asks AA for the number of a host AA does not speak for: nothing to answer (it
    crashed the next update before). A neighbour's route to a destination AA speaks for, under AA's
    own numbers, came round from AA: it counts as none, replacing what that neighbour said before."""
    t = RoutingTable("AA", ["BB", "CC", "DD"], {}, learn=True)
    t.line_up("BB", 0, True, True)
    t.line_up("DD", 0)  # version 1: AA speaks for what DD reaches
    t.advert("DD", b"DD=0 EE=1", 0)
    t.advert("BB", b"?QQ/1@AA ?ZZ/4", 1)
    assert t.news_for("BB") and t.next_hop("QQ") is None
    t.advert("BB", b"EE=5/0@XX", 2)
    t.advert("BB", b"EE=3/0@AA", 3)  # BB now goes to EE through AA: not a way for AA
    assert t.heard["BB"]["EE"].dist == NO_ROUTE and t.next_hop("EE") == "DD"
