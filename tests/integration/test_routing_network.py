"""Multi-hop routing between real daemon processes over real pseudo-terminals (issue 11)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, start_all, stop_all, wait_until, write_config
from mccs.testbed.loopback import Options, run_network, timers
from mccs.testbed.vserial import Lines

BAUD = 115200
V1_DAEMON = Path(__file__).with_name("v1_daemon.py")


@contextlib.contextmanager
def _network(tmp_path, links: list[str], routes: dict[str, list[dict]] | None = None, v1: tuple[str, ...] = (),
             defaults: bool = False, **host_keys):
    """Daemons joined by async vserial lines (`AA-BB` specs), stopped at the end; those in `v1`
    speak docs/DESIGN.md's version 1 (no routing). Yields the daemons by host and the lines.
    `defaults`: every line as a user's config has it (9600 baud, the default timers)."""
    keys = {} if defaults else {"protocol": "async", "baud": BAUD, **timers(BAUD)}
    hosts = sorted({h for link in links for h in link.split("-")})
    daemons: dict[str, DaemonProcess] = {}
    with Lines(str(tmp_path / "dev"), links, baud=9600 if defaults else BAUD) as vl:
        try:
            for h in hosts:
                peers = [p for link in links for a, p in [link.split("-"), link.split("-")[::-1]] if a == h]
                lines = [{"peer": p, "port": vl.port(h, p), **keys} for p in peers]
                daemons[h] = DaemonProcess(write_config(tmp_path, h, lines, (routes or {}).get(h, []), **host_keys),
                                           program=[sys.executable, str(V1_DAEMON)] if h in v1 else None)
            start_all(daemons.values())
            yield daemons, vl
        finally:
            stop_all(daemons.values())


@contextlib.contextmanager
def _chain(tmp_path, hosts: list[str], routes: dict[str, list[dict]] | None = None, v1: tuple[str, ...] = (),
           **host_keys):
    with _network(tmp_path, [f"{a}-{b}" for a, b in zip(hosts, hosts[1:])], routes, v1, **host_keys) as (d, _):
        yield d


def _wait_route(d: DaemonProcess, to: str, via: str | None = None, timeout: float = 30.0) -> dict:
    """The route to `to` (through `via`, if given), once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with mccs.connect(d.config, None) as admin:
            route = next((r for r in admin.status()["routes"] if r["to"] == to), None)
        if route and route["distance"] is not None and via in (None, route["via"]):
            return route
        time.sleep(0.1)
    raise AssertionError(f"no route to {to}{' via ' + via if via else ''} at {d.cfg.id}")


@pytest.mark.timeout(180)
def test_a_chain_of_four_carries_both_ways_through_a_kill9_of_a_transit_host(tmp_path):
    with _chain(tmp_path, ["AA", "BB", "CC", "DD"]) as d:
        route = _wait_route(d["AA"], "DD")
        assert (route["via"], route["distance"], route["kind"]) == ("BB", 3, "learned") and route["age"] >= 0
        _wait_route(d["DD"], "AA")
        count = 60

        def send(src: str, dst: str) -> None:
            with mccs.connect(d[src].config, "S") as s:
                for i in range(count):
                    s.send(f"{dst}R", b"%s %d" % (src.encode(), i))
        senders = [threading.Thread(target=send, args=p) for p in (("AA", "DD"), ("DD", "AA"))]
        for t in senders:
            t.start()
        time.sleep(0.5)
        d["CC"].kill()  # kill -9 in the middle of the traffic: CC held messages in transit
        time.sleep(0.3)
        d["CC"].start()
        for t in senders:
            t.join(60)
        for dst, src in (("DD", "AA"), ("AA", "DD")):
            got = []
            with mccs.connect(d[dst].config, "R") as r:
                while len(got) < count and (m := r.recv(timeout=60)) is not None:
                    got.append(m.data)
                assert r.recv(timeout=1) is None  # nothing twice
            assert got == [b"%s %d" % (src.encode(), i) for i in range(count)]
        with mccs.connect(d["BB"].config, None) as admin:
            assert admin.status()["counters"]["forwarded"] > 0


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(300)
def test_loopback_ring_routes_between_any_hosts_through_cuts_and_kills(tmp_path):
    v = run_network(Options(hosts=4, topology="ring", protocol="async", baud=19200, messages=1000, kill_every=0.8,
                            disconnect_every=0.6, disconnect_for=1.5, timeout=240, dir=str(tmp_path), quiet=True))
    assert v["sent"] == 1000 and v["kills"] >= 2 and v["disconnects"] >= 2, v
    assert (v["lost"], v["duplicated"], v["out_of_order"], v["unexpected"]) == (0, 0, 0, 0), v


def _notices(c, count: int, timeout: float = 60.0) -> list[tuple[str, dict]]:
    """(FROM_ID, JSON text) of the next `count` notices for this process."""
    got = []
    while len(got) < count and (m := c.recv(timeout=timeout)) is not None:
        got.append((m.from_id.rstrip(), json.loads(m.data)))
    return got


@pytest.mark.timeout(240)
def test_receipts_cross_three_hops_through_kill9_of_every_host_and_a_stopped_host_returns_late_messages(tmp_path):
    with _chain(tmp_path, ["AA", "BB", "CC", "DD"]) as d:
        _wait_route(d["AA"], "DD")
        _wait_route(d["DD"], "AA")
        with mccs.connect(d["AA"].config, "S") as s:
            ids = [s.send("DDR", b"%d" % i, receipt=True) for i in range(4)]
            with mccs.connect(d["DD"].config, "R") as r:
                assert [r.recv(timeout=60).data for _ in ids] == [b"%d" % i for i in range(4)]
            for host in ("DD", "CC", "BB"):  # every host the receipts cross dies once on their way back
                d[host].kill()
                d[host].start()
        with mccs.connect(d["AA"].config, "S") as s:
            got = _notices(s, len(ids))
            assert [(f, n["notice"], n["msg_id"]) for f, n in got] == [("DDMCCS", "delivered", i) for i in ids]
            assert s.recv(timeout=1) is None  # each once

            d["DD"].stop()  # DD is away longer than the next message may wait
            late = s.send("DDR", b"late", ttl=3)
            (f, n), = _notices(s, 1)
            assert (n["notice"], n["msg_id"], n["to_id"].rstrip()) == ("undeliverable", late, "DDR"), n
            assert f in ("AAMCCS", "BBMCCS", "CCMCCS") and "ttl" in n["reason"]
            d["DD"].start()
            _wait_route(d["AA"], "DD")
            s.send("DDR", b"after")
        with mccs.connect(d["DD"].config, "R") as r:
            assert r.recv(timeout=60).data == b"after" and r.recv(timeout=1) is None  # never the late one


@pytest.mark.timeout(120)
def test_static_and_default_routes_carry_and_a_static_loop_returns_the_message_at_the_hop_limit(tmp_path):
    routes = {"AA": [{"to": "*", "via": "BB"}], "BB": [{"to": "ZZ", "via": "AA"}], "CC": [{"to": "*", "via": "BB"}]}
    with _chain(tmp_path, ["AA", "BB", "CC"], routes, routing="static", hop_limit=4) as d:
        with mccs.connect(d["AA"].config, "S") as s, mccs.connect(d["CC"].config, "S") as t:
            s.send("CCR", b"by the default route")
            t.send("AAR", b"and back")
            loop = s.send("ZZR", b"round and round")  # BB sends ZZ back to AA, whose default is BB
            with mccs.connect(d["CC"].config, "R") as r:
                assert r.recv(timeout=30).data == b"by the default route"
            with mccs.connect(d["AA"].config, "R") as r:
                assert r.recv(timeout=30).data == b"and back"
            (f, n), = _notices(s, 1)
            assert (n["notice"], n["msg_id"]) == ("undeliverable", loop) and n["reason"] == "hop limit", n
            assert s.recv(timeout=2) is None  # one notice, whichever host it stopped at
        with mccs.connect(d["AA"].config, None) as admin:
            routes_aa = {r["to"]: r for r in admin.status()["routes"]}
        assert (routes_aa["*"]["via"], routes_aa["*"]["kind"]) == ("BB", "default") and "CC" not in routes_aa


@pytest.mark.timeout(120)
def test_a_version1_peer_carries_direct_traffic_and_a_host_never_heard_of_is_refused_at_once(tmp_path):
    with _chain(tmp_path, ["AA", "BB", "CC"], v1=("BB",)) as d:
        for h, peer in (("AA", "BB"), ("CC", "BB")):
            with mccs.connect(d[h].config, None) as admin:
                deadline = time.monotonic() + 30
                while (line := admin.status()["lines"][0])["state"] != "UP" and time.monotonic() < deadline:
                    time.sleep(0.1)
            assert (line["peer"], line["state"], line["routing"]) == (peer, "UP", False)
        with mccs.connect(d["AA"].config, "S") as s:
            with pytest.raises(mccs.Refused) as e:
                s.send("CCR", b"no way through an old host")  # CC is never advertised by BB
            assert e.value.code == "unknown_host"
            with pytest.raises(mccs.Refused):
                s.send("QQR", b"never heard of")
            ids = [s.send("BBR", b"%d" % i) for i in range(5)]
        with mccs.connect(d["BB"].config, "R") as r:
            got = [r.recv(timeout=30) for _ in ids]
            assert [(m.msg_id, m.data) for m in got] == [(i, b"%d" % k) for k, i in enumerate(ids)]
            with mccs.connect(d["BB"].config, "S") as s:
                s.send("AAR", b"back")
                s.send("CCR", b"over")
        for h, text in (("AA", b"back"), ("CC", b"over")):
            with mccs.connect(d[h].config, "R") as r:
                assert r.recv(timeout=30).data == text


@pytest.mark.timeout(180)
def test_a_ring_carries_round_the_other_way_while_a_line_is_cut_and_comes_back_when_it_returns(tmp_path):
    with _network(tmp_path, ["AA-BB", "BB-CC", "CC-DD", "DD-AA"]) as (d, vl):
        assert _wait_route(d["AA"], "BB")["via"] == "BB"
        _wait_route(d["BB"], "AA")
        count = 80

        def send() -> None:
            with mccs.connect(d["AA"].config, "S") as s:
                for i in range(count):
                    s.send("BBR", b"%d" % i)
                    time.sleep(0.02)
        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.4)
        vl.lines["AA-BB"].disconnect()  # a pulled cable in the middle of the traffic
        assert _wait_route(d["AA"], "BB", via="DD", timeout=60)["distance"] == 3
        sender.join(60)
        with mccs.connect(d["BB"].config, "R") as r:
            got = [r.recv(timeout=30).data for _ in range(count)]
            assert r.recv(timeout=1) is None  # none twice
        assert got == [b"%d" % i for i in range(count)]  # all of them, in order
        with mccs.connect(d["CC"].config, None) as admin:
            assert admin.status()["counters"]["forwarded"] > 0  # some went the other way round
        vl.lines["AA-BB"].reconnect()
        assert _wait_route(d["AA"], "BB", via="BB", timeout=60)["distance"] == 1
        with mccs.connect(d["AA"].config, "S") as s:
            s.send("BBR", b"direct again")
        with mccs.connect(d["BB"].config, "R") as r:
            assert r.recv(timeout=30).data == b"direct again"


@pytest.mark.timeout(120)
def test_a_ttl_expiry_at_a_transit_host_is_told_back_and_stops_nothing_with_every_default(tmp_path):
    """Issue 32 item 1, the adversarial run: AA-BB-CC with every default host key (max_message
    128), BB-CC cut, a message with ttl 2 expires at BB. Its void goes on when the line is back
    and CC's notice reaches AA across two lines, and the messages sent after it all reach CC with
    their receipts (the notice was once 131 bytes and held everything behind it)."""
    with _network(tmp_path, ["AA-BB", "BB-CC"]) as (d, vl):
        _wait_route(d["AA"], "CC")
        _wait_route(d["CC"], "AA")
        vl.lines["BB-CC"].disconnect()
        with mccs.connect(d["AA"].config, "S") as s:
            late = s.send("CCR", b"late", ttl=2)
            with mccs.connect(d["BB"].config, None) as admin:  # its ttl passes while it waits at BB
                wait_until(lambda: admin.status()["counters"].get("expired"), 60, "the message expired at BB")
            vl.lines["BB-CC"].reconnect()
            (f, n), = _notices(s, 1)
            assert (f, n["notice"], n["msg_id"], n["reason"]) == ("CCMCCS", "undeliverable", late, "ttl"), n
            ids = [s.send("CCR", b"%d" % i, receipt=True) for i in range(6)]
            with mccs.connect(d["CC"].config, "R") as r:
                assert [r.recv(timeout=60).data for _ in ids] == [b"%d" % i for i in range(6)]
            got = _notices(s, len(ids))
            assert sorted((f, n["msg_id"], n["reason"]) for f, n in got) == sorted(("CCMCCS", i, "taken") for i in ids)
        for daemon in d.values():
            with mccs.connect(daemon.config, None) as admin:
                status = admin.status()
                assert not any(line["counters"].get("too_large") for line in status["lines"]), status["lines"]
                # nothing stays on a SEND_LIST; the daemons' own messages (custody's states, batched
                # up to 10 s) may still be on their way as the last receipt comes, the longer on a
                # loaded machine: so within 30 s, not at once
                wait_until(lambda: admin.status()["lists"]["send"] == 0, 30, f"{daemon.cfg.id}'s SEND_LIST empty")


def _distances(d: DaemonProcess) -> dict[str, int]:
    with mccs.connect(d.config, None) as admin:
        return {r["to"]: r["distance"] for r in admin.status()["routes"] if r["distance"] is not None}


@pytest.mark.timeout(420)
def test_a_ring_of_40_daemons_with_every_default_learns_every_host_and_goes_the_long_way_round_a_cut(tmp_path):
    """Issue 38: a diameter of 20 lines, which version 1's routing (16 is no route) never carried.
    AA sends two messages to every host and each sends two back, exactly once and in order; then
    the line AA-AB is cut, and AA and AB reach each other the long way round, 39 lines."""
    from mccs.testbed.bench_scale import host_ids
    ids = host_ids(40)
    with _network(tmp_path, [f"{a}-{b}" for a, b in zip(ids, ids[1:] + ids[:1])], defaults=True) as (d, vl):
        shortest = {host: min(i, 40 - i) for i, host in enumerate(ids[1:], 1)}
        wait_until(lambda: _distances(d["AA"]) == shortest, 120, "the shortest route from AA to every host")
        for host in ids[1:]:
            wait_until(lambda: set(_distances(d[host])) == set(ids) - {host}, 60, f"{host} to learn every host")
        with mccs.connect(d["AA"].config, "S") as s:
            for host in ids[1:]:
                for n in (1, 2):
                    s.send(host + "R", b"%s %d" % (host.encode(), n))
        for host in ids[1:]:
            with mccs.connect(d[host].config, "R") as r:
                assert [r.recv(timeout=120).data for _ in range(2)] == [b"%s %d" % (host.encode(), n) for n in (1, 2)]
                assert r.recv(timeout=0.2) is None
            with mccs.connect(d[host].config, "S") as s:
                for n in (1, 2):
                    s.send("AAR", b"%s %d" % (host.encode(), n))
        with mccs.connect(d["AA"].config, "R") as r:
            got = [r.recv(timeout=120) for _ in range(78)]
            assert r.recv(timeout=0.2) is None
        assert sorted(m.data for m in got) == sorted(b"%s %d" % (h.encode(), n) for h in ids[1:] for n in (1, 2))
        for host in ids[1:]:  # in order from each
            assert [m.data for m in got if m.data.startswith(host.encode())] == [b"%s 1" % host.encode(),
                                                                               b"%s 2" % host.encode()]
        vl.lines["AA-AB"].disconnect()
        assert _wait_route(d["AA"], "AB", via=ids[-1], timeout=120)["distance"] == 39
        _wait_route(d["AB"], "AA", via="AC", timeout=60)
        with mccs.connect(d["AA"].config, "S") as s:
            s.send("ABR", b"the long way")
        with mccs.connect(d["AB"].config, "R") as r:
            m = r.recv(timeout=120)
            assert m.data == b"the long way"
        with mccs.connect(d["AB"].config, "S") as s:
            s.send("AAR", b"and back")
        with mccs.connect(d["AA"].config, "R") as r:
            assert r.recv(timeout=120).data == b"and back"


@pytest.mark.timeout(120)
def test_bench_idle_reports_what_idle_daemons_cost():
    run = subprocess.run([sys.executable, "-m", "mccs.cli", "bench", "idle", "--daemons", "3", "--watch", "2",
                          "--settle", "0", "--json"], capture_output=True, text=True, timeout=100)
    out = json.loads(run.stdout)
    assert out["daemons"] == 3 and 10 < out["rss_mb"]["median"] <= out["rss_mb"]["max"] < 500, out
    assert 0 <= out["cpu_s_per_hour"]["median"] <= out["cpu_s_per_hour"]["max"] and out["watched"] >= 2
    bad = subprocess.run([sys.executable, "-m", "mccs.cli", "bench", "idle", "--daemons", "1"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--daemons must be" in bad.stderr
