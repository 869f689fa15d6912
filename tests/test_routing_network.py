"""Multi-hop routing between real daemon processes over real pseudo-terminals (issue 11)."""
from __future__ import annotations

import threading
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, write_config
from mccs.testbed.loopback import Options, run_network, timers
from mccs.testbed.vserial import Lines

BAUD = 115200


def _chain(tmp_path, hosts: list[str]) -> tuple[Lines, dict[str, DaemonProcess]]:
    links = [f"{a}-{b}" for a, b in zip(hosts, hosts[1:])]
    vl = Lines(str(tmp_path / "dev"), links, baud=BAUD).__enter__()
    keys = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
    daemons = {}
    for i, h in enumerate(hosts):
        peers = hosts[max(0, i - 1):i] + hosts[i + 1:i + 2]
        daemons[h] = DaemonProcess(write_config(tmp_path, h, [{"peer": p, "port": vl.port(h, p), **keys}
                                                             for p in peers])).start()
    return vl, daemons


def _wait_route(d: DaemonProcess, to: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with mccs.connect(d.config, None) as admin:
            route = next((r for r in admin.status()["routes"] if r["to"] == to), None)
        if route and route["distance"] is not None:
            return route
        time.sleep(0.1)
    raise AssertionError(f"no route to {to} at {d.cfg.id}")


@pytest.mark.timeout(180)
def test_a_chain_of_four_carries_both_ways_through_a_kill9_of_a_transit_host(tmp_path):
    vl, d = _chain(tmp_path, ["AA", "BB", "CC", "DD"])
    try:
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
    finally:
        for daemon in d.values():
            daemon.stop()
        vl.close()


@pytest.mark.timeout(300)
def test_loopback_ring_routes_between_any_hosts_through_cuts_and_kills(tmp_path):
    v = run_network(Options(hosts=4, topology="ring", protocol="async", baud=19200, messages=1000, kill_every=0.8,
                            disconnect_every=0.6, disconnect_for=1.5, timeout=240, dir=str(tmp_path), quiet=True))
    assert v["sent"] == 1000 and v["kills"] >= 2 and v["disconnects"] >= 2, v
    assert (v["lost"], v["duplicated"], v["out_of_order"], v["unexpected"]) == (0, 0, 0, 0), v
