"""Routes: the neighbour a message for a host goes to next (distance vector, docs/ROUTING.md).

Each host tells its neighbours, over lines that negotiated routing at sign-on, its distance to
every host it knows (itself 0). A neighbour's distance plus one is a candidate; the smallest
wins (ties keep the current route, then the lower neighbour id). Split horizon with poisoned
reverse: a host tells the neighbour it routes a destination through that the destination is
unreachable (INFINITY), so two hosts never count to infinity through each other. Updates are
triggered, never periodic: the lines are reliable, a line going DOWN forgets what its
neighbour said, and a line coming UP exchanges full vectors.

Which route wins, for a destination D:
1. a `[[route]] to = D` (static);
2. the direct line, when D is a neighbour whose line does not route (BSC, or a peer that signed
   on without ROUTE2): D's messages always take that line, and wait while it is down, so that
   they never reach D by two disciplines at once (docs/ROUTING.md);
3. the best learned distance through an UP routing neighbour (`routing = "auto"` only);
4. the direct line when D is a neighbour (its messages wait while that line is down);
5. a default route `[[route]] to = "*"`;
6. none: the messages wait on SEND_LIST until a route appears.

A neighbour on a line that is a call (docs/CALLS.md) is a route while no call is up: its line is
taken as up, and what it said in the last call stands until the next one; each route through it
costs CALL_COST more, so that a path of leased lines is preferred where there is one.

Pure: the changes to remember (learned hosts survive a restart) come back as data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from checkpoint import changes as ch
from checkpoint.changes import Change

INFINITY = 16  # a distance this large is no route: the hop limit's default too
CALL_COST = 2  # added to a route through a neighbour on a line that is a call
DEFAULT = "*"


@dataclass(frozen=True)
class Route:
    dest: str
    via: str | None
    dist: int  # hops; INFINITY when `via` is known but the destination is not reachable now
    kind: str  # "neighbour", "learned", "static", "default", or "none"


class RoutingTable:
    def __init__(self, host: str, neighbours: list[str], static: dict[str, str], learn: bool,
                 known: Iterable[str] = (), direct_only: Iterable[str] = frozenset(), calls: Iterable[str] = ()):
        self.host = host
        self.neighbours = set(neighbours)
        self.direct_only = set(direct_only)  # neighbours on lines that do not route
        self.static = dict(static)  # destination (or "*") -> neighbour
        self.learn = learn
        self.known: set[str] = set(known) | self.neighbours | {d for d in static if d != DEFAULT}
        self.known.discard(host)
        self.calls = set(calls)  # neighbours on lines that are calls: routes between calls too
        self.up: set[str] = set(self.calls)  # neighbours whose line is UP and negotiated routing (or is a call)
        self.heard: dict[str, dict[str, int]] = {}  # neighbour -> what it last said, destination -> distance
        self.version = 0  # moves on when a route may have changed: a vector told at this version is still news
        self.best: dict[str, Route] = {}
        self.changed: list[Route] = []  # routes that changed since the caller last took them
        self._since: dict[str, float] = {}
        self._recompute(0.0)
        self.changed.clear()

    # -- inputs --------------------------------------------------------------------------------
    def line_up(self, peer: str, now: float, routed: bool = True) -> list[Change]:
        """A line signed on; `routed`: both ends offered ROUTE2."""
        if routed:
            self.direct_only.discard(peer)
            self.up.add(peer)
            self.heard[peer] = {}
        else:
            self.direct_only.add(peer)
        return self._recompute(now)

    def line_down(self, peer: str, now: float) -> list[Change]:
        if peer in self.calls:  # between calls it stays a route, as its peer last said
            return []
        self.up.discard(peer)
        self.heard.pop(peer, None)
        return self._recompute(now)

    def advert(self, peer: str, vector: dict[str, int], now: float) -> list[Change]:
        """What `peer` says it reaches (a partial update: the destinations it names)."""
        if not self.learn or peer not in self.up:
            return []
        said = {d: min(max(dist, 0), INFINITY) for d, dist in vector.items() if d != self.host}
        self.heard[peer].update(said)
        return self._recompute(now, said)

    # -- answers -------------------------------------------------------------------------------
    def take_changes(self) -> list[Route]:
        changed, self.changed = self.changed, []
        return changed

    def next_hop(self, dest: str) -> str | None:
        route = self.best.get(dest)
        return route.via if route else self.static.get(DEFAULT)

    def is_known(self, dest: str) -> bool:
        return dest == self.host or dest in self.known or DEFAULT in self.static

    def vector_for(self, peer: str) -> dict[str, int]:
        """The distances to tell `peer`, poisoned where the route goes through it."""
        out = {self.host: 0}
        for dest in sorted(self.known):
            route = self.best[dest]
            reachable = route.kind in ("learned", "neighbour") and route.via in self.up
            out[dest] = route.dist if reachable and route.via != peer else INFINITY
        return out

    def status(self, now: float) -> list[dict]:
        """Every route, and the default route (to "*") last if there is one."""
        default = [Route(DEFAULT, self.static[DEFAULT], INFINITY, "default")] if DEFAULT in self.static else []
        return [{"to": r.dest, "via": r.via, "distance": r.dist if r.dist < INFINITY else None, "kind": r.kind,
                 "age": round(now - self._since.get(r.dest, now), 1)}
                for r in sorted(self.best.values(), key=lambda r: r.dest) + default]

    # -- the choice ----------------------------------------------------------------------------
    def _choose(self, dest: str) -> Route:
        if dest in self.static:
            return Route(dest, self.static[dest], 1 if self.static[dest] == dest else INFINITY, "static")
        if dest in self.direct_only:
            return Route(dest, dest, 1, "neighbour")
        if self.learn:
            current = self.best.get(dest)
            candidates = []
            for peer in self.up:
                dist = 1 if peer == dest else self.heard.get(peer, {}).get(dest, INFINITY) + 1
                dist += CALL_COST if peer in self.calls else 0
                if dist < INFINITY:
                    keep = current is not None and current.via == peer
                    candidates.append((dist, not keep, peer))
            if candidates:
                dist, _, peer = min(candidates)
                return Route(dest, peer, dist, "neighbour" if peer == dest else "learned")
        if dest in self.neighbours:
            return Route(dest, dest, (1 + CALL_COST * (dest in self.calls)) if dest in self.up else INFINITY,
                         "neighbour")
        if DEFAULT in self.static:
            return Route(dest, self.static[DEFAULT], INFINITY, "default")
        return Route(dest, None, INFINITY, "none")

    def _recompute(self, now: float, dests: Iterable[str] | None = None) -> list[Change]:
        """The routes to `dests` again (an update changes only the destinations it names), or every
        route (a line came or went); the hosts learned for the first time are remembered. When a
        route changed, or every route was chosen again, the table's `version` moves on: what it
        would tell a neighbour may have changed."""
        names = {d for heard in self.heard.values() for d in heard} if dests is None else set(dests)
        learned = {d for d in names if any(heard.get(d, INFINITY) < INFINITY for heard in self.heard.values())}
        learned -= self.known | {self.host}
        self.known |= learned
        moved = dests is None
        for dest in self.known if dests is None else sorted(names & self.known):
            route = self._choose(dest)
            if self.best.get(dest) != route:
                self.best[dest] = route
                self._since[dest] = now
                self.changed.append(route)
                moved = True
        if moved:
            self.version += 1
        return [ch.add_known_host(d) for d in sorted(learned)]


def encode_vector(vector: dict[str, int]) -> bytes:
    """`AA=0 BB=1 DD=16`: ASCII, one token per destination."""
    return " ".join(f"{d}={n}" for d, n in vector.items()).encode("ascii")


def decode_vector(data: bytes) -> dict[str, int]:
    """Raises ValueError on anything but `HOST=N` tokens of 2-character ids."""
    out = {}
    for token in data.decode("ascii").split():
        host, _, dist = token.partition("=")
        if len(host) != 2 or not dist.isdigit():
            raise ValueError(f"bad route token {token!r}")
        out[host] = int(dist)
    return out
