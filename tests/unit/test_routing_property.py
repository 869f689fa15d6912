"""Sequenced routing (issue 38, docs/ROUTING.md 3a) as a property: routing tables of random
networks joined by reliable lines (what one table tells another arrives in order, or is lost with
its line), under random cuts, heals and restarts. After every update no host routes a destination
in a cycle; once the events stop, every host reaches every host it can by a shortest path."""
from __future__ import annotations

import random
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mccs.core.routing import RoutingTable

pytestmark = pytest.mark.timeout(300)


def _names(n: int) -> list[str]:
    return [f"{chr(65 + i // 26)}{chr(65 + i % 26)}" for i in range(n)]


class Network:
    """The tables, and per direction of each line that is up the updates on their way."""

    def __init__(self, n: int, edges: set[tuple[int, int]], rng: random.Random, sequenced: bool = True):
        self.names = _names(n)
        self.rng, self.sequenced = rng, sequenced
        self.adj: dict[str, set[str]] = {h: set() for h in self.names}
        for a, b in edges:
            self.adj[self.names[a]].add(self.names[b])
            self.adj[self.names[b]].add(self.names[a])
        self.tables = {h: self._table(h, ()) for h in self.names}
        self.wire: dict[tuple[str, str], deque[bytes]] = {}
        self.updates = 0
        self.loops: list[str] = []  # every routing loop seen, after the update or event that made it
        for a, b in sorted(self.lines()):
            self.heal(a, b)

    def _table(self, host: str, known) -> RoutingTable:
        return RoutingTable(host, sorted(self.adj[host]), {}, True, known, limit=255)

    def lines(self) -> set[tuple[str, str]]:
        return {(a, b) for a in self.adj for b in self.adj[a] if a < b}

    def up(self) -> set[tuple[str, str]]:
        return {k for k in self.wire if k[0] < k[1]}

    # -- events ---------------------------------------------------------------------------------
    def heal(self, a: str, b: str) -> None:
        self.wire[a, b], self.wire[b, a] = deque(), deque()
        for x, y in ((a, b), (b, a)):
            self.tables[x].line_up(y, 0.0, True, self.sequenced)
            self.check(x)

    def cut(self, a: str, b: str) -> None:
        del self.wire[a, b], self.wire[b, a]  # what was on its way is lost with the line
        for x, y in ((a, b), (b, a)):
            self.tables[x].line_down(y, 0.0)
            self.check(x)

    def restart(self, host: str) -> None:
        """Memory lost; the hosts it knew are in its checkpoint."""
        peers = [p for p in self.adj[host] if (host, p) in self.wire]
        for p in peers:
            self.cut(host, p)
        self.tables[host] = self._table(host, self.tables[host].known)
        for p in peers:
            self.heal(host, p)

    def deliver(self) -> bool:
        """One update along one line, chosen at random; False when none is on its way."""
        for (a, b), q in self.wire.items():
            news = self.tables[a].news_for(b)
            if news:
                q.append(" ".join(news).encode("ascii"))
        busy = [k for k, q in self.wire.items() if q]
        if not busy:
            return False
        a, b = self.rng.choice(busy)
        self.tables[b].advert(a, self.wire[a, b].popleft(), 0.0)
        self.updates += 1
        self.check(b)
        return True

    def settle(self, most: int = 200_000) -> None:
        for _ in range(most):
            if not self.deliver():
                return
        raise AssertionError(f"routing updates still flowing after {most}")

    # -- the properties -------------------------------------------------------------------------
    def check(self, host: str) -> None:
        """Any cycle through `host` for a destination whose route there just changed is kept in
        `loops` (a new cycle must pass through a host whose next hop changed)."""
        for route in self.tables[host].take_changes():
            at, seen = host, set()
            while at is not None and at != route.dest:
                if at in seen:
                    self.loops.append(f"{route.dest}: a routing loop through {sorted(seen)}")
                    break
                seen.add(at)
                at = self.tables[at].next_hop(route.dest)

    def not_shortest(self) -> list[tuple]:
        """(host, destination, its route, the shortest distance) wherever the route is not a shortest path."""
        wrong = []
        up = self.up()
        for dest in self.names:
            dist, todo = {dest: 0}, deque([dest])
            while todo:
                x = todo.popleft()
                for y in self.adj[x]:
                    if y not in dist and (min(x, y), max(x, y)) in up:
                        dist[y] = dist[x] + 1
                        todo.append(y)
            for host, d in dist.items():
                route = self.tables[host].best.get(dest)
                if host != dest and (route is None or (route.dist, dist.get(route.via)) != (d, d - 1)):
                    wrong.append((host, dest, route, d))
        return wrong


def _connected(n: int, extra: list[tuple[int, int]], seed: int) -> set[tuple[int, int]]:
    rng = random.Random(seed)
    edges = {(rng.randrange(i), i) for i in range(1, n)}  # a random tree keeps it connected
    return edges | {(min(a, b) % n, max(a, b) % n) for a, b in extra if a % n != b % n}


@st.composite
def scenarios(draw, most: int):
    n = draw(st.integers(2, most))
    extra = draw(st.lists(st.tuples(st.integers(0, most - 1), st.integers(0, most - 1)), max_size=n))
    events = draw(st.lists(st.tuples(st.sampled_from(["cut", "heal", "restart"]), st.integers(0, 10_000),
                                     st.integers(0, 50)), max_size=12))
    return n, extra, events, draw(st.integers(0, 2**32))


def _run(n: int, extra, events, seed: int) -> Network:
    net = Network(n, _connected(n, extra, seed), random.Random(seed))
    for kind, which, updates_between in events:
        for _ in range(updates_between):  # events while the updates of the last are on their way
            if not net.deliver():
                break
        lines = sorted(net.lines())
        if kind == "cut" and net.up():
            net.cut(*sorted(net.up())[which % len(net.up())])
        elif kind == "heal" and set(lines) - net.up():
            net.heal(*sorted(set(lines) - net.up())[which % len(set(lines) - net.up())])
        elif kind == "restart":
            net.restart(net.names[which % n])
    net.settle()
    return net


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(most=24))
def test_no_loop_at_any_step_and_shortest_paths_once_quiet_small_networks(scenario):
    net = _run(*scenario)
    assert (net.loops, net.not_shortest()) == ([], [])


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(most=200))
def test_no_loop_at_any_step_and_shortest_paths_once_quiet_up_to_200_hosts(scenario):
    net = _run(*scenario)
    assert (net.loops, net.not_shortest()) == ([], [])


def test_a_ring_of_40_learns_every_host_and_a_cut_sends_the_far_side_the_long_way_round():
    """The diameter version 1 cannot carry (16 is its "no route"): 20 lines across, then 39."""
    net = Network(40, {(i, (i + 1) % 40) for i in range(40)}, random.Random(1))
    net.settle()
    assert (net.loops, net.not_shortest()) == ([], []) and net.tables["AA"].best["AU"].dist == 20
    net.cut("AA", "AB")
    net.settle()
    assert (net.loops, net.not_shortest()) == ([], [])
    assert (net.tables["AA"].best["AB"].dist, net.tables["AA"].next_hop("AB")) == (39, "BN")


def test_a_version_1_network_still_stops_at_15_lines():
    net = Network(20, {(i, i + 1) for i in range(19)}, random.Random(1), sequenced=False)
    net.settle()
    assert net.tables["AA"].best["AP"].dist == 15 and not net.tables["AA"].best["AQ"].reachable
