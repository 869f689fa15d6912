"""A ring of five in memory under the faults of issue 32's ring (every default but the simulated
lines' timers): messages with a ttl of 2.5 s and receipts asked, hosts killed (kill -9 and a
restart) and lines cut as they go. Every message is settled exactly once: delivered once with one
receipt, or returned once (undeliverable) and not delivered. The daemon's own core and driver."""
from __future__ import annotations

import base64
import collections
import json
import random

import pytest

from mccs.testbed.hostsim import SimNet, line

HOSTS = ["AA", "BB", "CC", "DD", "EE"]


def _ring(tmp_path, seed: int, n: int, kill: float, cut: float) -> tuple[int, list, int, int]:
    """`n` messages between random hosts; after each, a kill with probability `kill` and a cut (of
    0.5 to 3 s) with probability `cut`. Returns how many were accepted, the badly settled ones
    (origin, MSG_ID, deliveries, notices), and the kills and cuts made."""
    rng = random.Random(seed)
    net = SimNet(tmp_path, {h: [line(HOSTS[i - 1]), line(HOSTS[(i + 1) % 5])] for i, h in enumerate(HOSTS)},
                 seed=seed)
    assert net.run(lambda: all(net[h].kernel.routes.next_hop(HOSTS[i - 2]) for i, h in enumerate(HOSTS)),
                   duration=60)
    clients: dict = {}
    sent: dict[tuple[str, int], bytes] = {}
    delivered: collections.Counter = collections.Counter()
    notices: dict[tuple[str, int], list[str]] = collections.defaultdict(list)

    def client(host: str, name: str):
        if (host, name) not in clients:
            clients[host, name] = net.client(host, name)
        return clients[host, name]

    def take() -> None:
        for host in HOSTS:
            for name in ("R", "S"):
                while (m := client(host, name).recv(timeout=0).get("msg")) is not None:
                    data = base64.b64decode(m["data"])
                    if m["from_id"][2:].strip() == "MCCS":  # a notice about one of S's messages
                        body = json.loads(data)
                        notices[host, body["msg_id"]].append(body["notice"])
                    else:
                        delivered[data] += 1

    cuts: list = []
    kills = made_cuts = 0
    for i in range(n):
        src = rng.choice(HOSTS)
        dst = rng.choice([h for h in HOSTS if h != src])
        text = b"%s %d" % (src.encode(), i)
        sent[src, client(src, "S").send(dst + "R", text, ttl=2.5, receipt=True)["msg_id"]] = text
        net.run(duration=0.05)
        r = rng.random()
        if r < kill:  # kill -9, and the host's lines are quiet until it is started again 1 to 6 s later
            a = rng.randrange(5)
            net[HOSTS[a]].crash()
            kills += 1
            for key in [k for k in clients if k[0] == HOSTS[a]]:
                del clients[key]
            for channel in (net.channel(HOSTS[a - 1], HOSTS[a]), net.channel(HOSTS[a], HOSTS[(a + 1) % 5])):
                channel.disconnect()
                cuts.append((net.now + rng.uniform(1.0, 6.0), channel))
        elif r < kill + cut:
            a = rng.randrange(5)
            channel = net.channel(HOSTS[a], HOSTS[(a + 1) % 5])
            channel.disconnect()
            cuts.append((net.now + rng.uniform(0.5, 3.0), channel))
            made_cuts += 1
        for until, channel in [c for c in cuts if c[0] <= net.now]:
            cuts.remove((until, channel))
            if not any(c is channel for _, c in cuts):
                channel.reconnect()
        if i % 10 == 0:
            take()
    for _, channel in cuts:
        channel.reconnect()
    def wrong() -> list:
        return [(src, msg_id, delivered[text], notices[src, msg_id]) for (src, msg_id), text in sent.items()
                if notices[src, msg_id].count("undeliverable") + delivered[text] != 1
                or notices[src, msg_id].count("delivered") != delivered[text]]

    for _ in range(60):  # (a notice may wait for a line's back-off, a void for a probe)
        net.run(duration=5.0)
        take()
        if not wrong():
            net.run(duration=10.0)  # and nothing more comes
            take()
            break
    return len(sent), wrong(), kills, made_cuts


@pytest.mark.timeout(120)
def test_a_ring_of_five_with_kills_cuts_ttl_and_receipts_settles_every_message_once(tmp_path):
    sent, bad, kills, cuts = _ring(tmp_path, 1, 200, kill=0.04, cut=0.06)
    assert sent == 200 and kills >= 4 and cuts >= 6
    assert not bad, f"{len(bad)} of {sent} settled wrongly (origin, MSG_ID, deliveries, notices): {bad[:5]}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", range(100, 140))
def test_soak_rings_of_five_with_kills_cuts_ttl_and_receipts(tmp_path, seed):
    sent, bad, _, _ = _ring(tmp_path, seed, 300, kill=0.04, cut=0.06)
    assert not bad, f"{len(bad)} of {sent} settled wrongly: {bad[:5]}"
