"""Routes: the neighbour a message for a host goes to next (docs/ROUTING.md section 3).

Each host tells its neighbours, over lines that negotiated routing at sign-on, its distance to
every host it knows (itself 0). A neighbour's distance plus one is a candidate; the smallest
wins (ties keep the current route, then the lower neighbour id). Updates are triggered, never
periodic: the lines are reliable, a line going DOWN forgets what its neighbour said, and a line
coming UP exchanges full vectors.

Two dialects, chosen per line at sign-on:
- **Sequenced** (both ends offered SEQROUTE, section 3a): every distance carries the sequence
  number of its source (the destination itself, or a host that speaks for one it reaches over a
  line that is not sequenced). A host takes a route only if it is *feasible* (Babel's condition,
  RFC 8966 3.5.1): newer than the best this host has chosen for that source, or as new and
  shorter. A chain of next hops then always descends, so no two hosts route through each other
  and nothing counts to infinity, whatever the diameter. A host left with no feasible route
  withdraws it and asks the source, along the way its neighbours still know, for a newer number.
- **Version 1** (ROUTE2 alone): plain distances, 16 is no route, split horizon with poisoned
  reverse; such a peer works within 15 lines, as before.

Which route wins, for a destination D:
1. a `[[route]] to = D` (static);
2. the direct line, when D is a neighbour whose line does not route (BSC, or a peer that signed
   on without ROUTE2): D's messages always take that line, and wait while it is down, so that
   they never reach D by two disciplines at once (docs/ROUTING.md);
3. the best learned distance through an UP routing neighbour (`routing = "auto"` only), at most
   the hop limit;
4. the direct line when D is a neighbour (its messages wait while that line is down);
5. a default route `[[route]] to = "*"`;
6. none: the messages wait on SEND_LIST until a route appears.

A neighbour on a line that is a call (docs/CALLS.md) is a route while no call is up: its line is
taken as up, and what it said in the last call stands until the next one; each route through it
costs CALL_COST more, so that a path of leased lines is preferred where there is one.

Pure: the changes to remember (learned hosts survive a restart) come back as data, and what to
tell each neighbour is taken with `news_for`.
"""
from __future__ import annotations

import functools
import itertools
import re
from typing import Iterable, NamedTuple

from checkpoint import changes as ch
from checkpoint.changes import Change

SEQROUTE = "SEQROUTE"  # the sign-on feature of sequenced routing updates (section 3a)
INFINITY = 16  # "no route" on a version-1 routing line
NO_ROUTE = 0xFFFF  # a route's distance when there is none
CALL_COST = 2  # added to a route through a neighbour on a line that is a call
DEFAULT = "*"
SEQ_MOD = 1 << 16  # sequence numbers are 16 bits and wrap (RFC 8966 3.2.1)


def newer(a: int, b: int) -> bool:
    return 0 < (a - b) % SEQ_MOD < SEQ_MOD // 2


class Heard(NamedTuple):
    """What a neighbour said of a destination. (Tuples: a thousand hosts make millions.)"""
    dist: int  # NO_ROUTE: withdrawn
    seq: int | None = None  # None: a version-1 peer's distance, which has no number
    source: str = ""  # whose numbers `seq` counts: the destination, or a host that speaks for it


class Route(NamedTuple):
    dest: str
    via: str | None
    dist: int  # hops (a call's cost added); NO_ROUTE when `via` is known but the destination is not reachable now
    kind: str  # "neighbour", "learned", "static", "default", or "none"
    seq: int | None = None  # the source's number, for a route heard on a sequenced line
    source: str = ""

    @property
    def reachable(self) -> bool:
        return self.dist < NO_ROUTE


class RoutingTable:
    def __init__(self, host: str, neighbours: list[str], static: dict[str, str], learn: bool,
                 known: Iterable[str] = (), direct_only: Iterable[str] = frozenset(), calls: Iterable[str] = (),
                 limit: int = 64):
        self.host = host
        self.neighbours = set(neighbours)
        self.direct_only = set(direct_only)  # neighbours on lines that do not route
        self.static = dict(static)  # destination (or "*") -> neighbour
        self.learn = learn
        self.limit = limit  # the hop limit: a longer learned route is none
        self.known: set[str] = set(known) | self.neighbours | {d for d in static if d != DEFAULT}
        self.known.discard(host)
        self.calls = set(calls)  # neighbours on lines that are calls: routes between calls too
        self.up: set[str] = set(self.calls)  # neighbours whose line is UP and negotiated routing (or is a call)
        self.sequenced: set[str] = set()  # routing neighbours whose line agreed on SEQROUTE
        self.heard: dict[str, dict[str, Heard]] = {}  # neighbour -> what it last said, per destination
        self.best: dict[str, Route] = {}
        self.changed: list[Route] = []  # routes that changed since the caller last took them
        self.seq = 0  # this host's own number: moved on only when a neighbour asks for a newer one
        self.spoken: dict[str, int] = {}  # numbers of the destinations this host speaks for
        self.feasible: dict[tuple[str, str], tuple[int, int]] = {}  # (dest, source) -> best (seq, dist) chosen
        self.told: dict[str, dict[str, str]] = {}  # neighbour -> destination -> what it was last told, its number aside
        self.pending: dict[str, set[str]] = {}  # neighbour -> destinations whose entry may have moved
        self.asks: dict[str, dict[tuple[str, str], int]] = {}  # neighbour -> (dest, source) -> number to ask for
        self.asked: dict[str, dict[tuple[str, str], tuple[int, Heard]]] = {}  # dest -> what each (neighbour,
        # source) was asked for while its route stayed as it is, and what the neighbour had said then
        self.answer: dict[str, dict[str, tuple[int, str]]] = {}  # dest -> neighbour whose question was
        # passed on -> the number and source it asked for
        self._since: dict[str, float] = {}  # destination -> when its route last moved, the latest last
        self.moved = 0.0  # when any route last moved (its next hop, distance or kind)
        self._recompute(0.0)
        self.changed.clear()

    # -- inputs --------------------------------------------------------------------------------
    def line_up(self, peer: str, now: float, routed: bool = True, sequenced: bool = False) -> list[Change]:
        """A line signed on; `routed`: both ends offered ROUTE2; `sequenced`: and SEQROUTE."""
        if routed:
            self.direct_only.discard(peer)
            self.up.add(peer)
            (self.sequenced.add if sequenced else self.sequenced.discard)(peer)
            self.heard[peer] = {}
            self.told[peer] = {}
            self.pending[peer] = self.known | {self.host}
            self.asks.pop(peer, None)
            for asked in self.asked.values():
                for key in [k for k in asked if k[0] == peer]:
                    del asked[key]
            for waiting in self.answer.values():
                waiting.pop(peer, None)
        else:
            self.direct_only.add(peer)
        return self._recompute(now)

    def line_down(self, peer: str, now: float) -> list[Change]:
        if peer in self.calls:  # between calls it stays a route, as its peer last said
            return []
        self.up.discard(peer)
        self.heard.pop(peer, None)
        self.told.pop(peer, None)
        return self._recompute(now)

    def advert(self, peer: str, data: bytes, now: float) -> list[Change]:
        """A routing update from `peer` (a partial one: the destinations it names, and on a
        sequenced line the numbers it asks for). Raises ValueError if it is not one."""
        said, asks = decode_sequenced(data) if peer in self.sequenced else (
            {d: Heard(n if n < INFINITY else NO_ROUTE) for d, n in decode_vector(data).items()}, {})
        if not self.learn or peer not in self.up:
            return []
        # (what it says of a destination this host speaks for came round from here: none through it)
        said = {d: h if h.source != self.host else Heard(NO_ROUTE, None, d) for d, h in said.items() if d != self.host}
        self.heard.setdefault(peer, {}).update(said)
        for dest in said:  # what it says now may be asked of it again
            for key in [k for k in self.asked.get(dest, ()) if k[0] == peer]:
                del self.asked[dest][key]
        for (dest, source), seq in asks.items():
            self._on_ask(peer, dest, source, seq)
        return self._recompute(now, said)

    # -- answers -------------------------------------------------------------------------------
    def take_changes(self) -> list[Route]:
        changed, self.changed = self.changed, []
        return changed

    def next_hop(self, dest: str) -> str | None:
        route = self.best.get(dest)
        return route.via if route else self.static.get(DEFAULT)

    def moved_since(self, at: float) -> list[str]:
        """The destinations whose route moved at or after `at` (a watcher of the network's routes
        looks again only at those)."""
        return [] if self.moved < at else [
            d for d, _ in itertools.takewhile(lambda item: item[1] >= at, reversed(self._since.items()))]

    def is_known(self, dest: str) -> bool:
        return dest == self.host or dest in self.known or DEFAULT in self.static

    def has_news(self, peer: str) -> bool:
        """Does `peer` have entries or numbers to be told (news_for), as far as a cheap look says?"""
        return bool(self.pending.get(peer) or self.asks.get(peer))

    def news_for(self, peer: str) -> list[str]:
        """The update tokens `peer` has not heard yet (section 3): the entries that moved since it
        was last told, then the numbers asked of it. Costs only what changed. A newer number
        alone is news only to a neighbour that asked for it (its entry was forgotten then): the
        others learn it with the next change, or ask (section 3a, "Cost")."""
        told = self.told.get(peer)
        if told is None or not self.has_news(peer):
            return []
        news = []
        dests, self.pending[peer] = self.pending.get(peer, set()), set()
        for dest in sorted(dests):
            head, number, tail = self._entry(dest, peer)
            plain = head + tail
            if told.get(dest, plain if plain.endswith("=-") else None) != plain:  # (nothing to withdraw yet)
                told[dest] = plain
                news.append(head + number + tail)
        for (dest, source), seq in sorted(self.asks.pop(peer, {}).items()):
            news.append(f"?{dest}/{seq}" + (f"@{source}" if source != dest else ""))
        return news

    def status(self, now: float) -> list[dict]:
        """Every route, and the default route (to "*") last if there is one."""
        default = [Route(DEFAULT, self.static[DEFAULT], NO_ROUTE, "default")] if DEFAULT in self.static else []
        return [{"to": r.dest, "via": r.via, "distance": r.dist if r.reachable else None, "kind": r.kind,
                 "age": round(now - self._since.get(r.dest, now), 1)}
                for r in sorted(self.best.values(), key=lambda r: r.dest) + default]

    # -- what a neighbour is told ----------------------------------------------------------------
    def _entry(self, dest: str, peer: str) -> tuple[str, str, str]:
        """`DD=3/7`, `DD=3/7@BB` (spoken for by BB) or `DD=-` on a sequenced line; `DD=3` (16: none)
        on a version-1 one. Poisoned where the route goes through `peer`. In three parts, the number
        apart: `("DD=3", "/7", "@BB")` (whether it is news does not depend on the number)."""
        sequenced = peer in self.sequenced
        if dest == self.host:
            return (f"{dest}=0", f"/{self.seq}", "") if sequenced else (f"{dest}=0", "", "")
        route = self.best[dest]
        told = route.reachable and route.kind in ("learned", "neighbour") and route.via in self.up \
            and route.via != peer
        if not sequenced:
            return f"{dest}={min(route.dist, INFINITY) if told else INFINITY}", "", ""
        if not told or (route.seq is None and route.via in self.sequenced and route.via not in self.calls):
            return f"{dest}=-", "", ""  # (a sequenced neighbour not yet heard from is told once it tells its number)
        if route.seq is None:  # reached over a line that is not sequenced: this host speaks for it
            return f"{dest}={route.dist}", f"/{self.spoken.setdefault(dest, 0)}", f"@{self.host}"
        return f"{dest}={route.dist}", f"/{route.seq}", f"@{route.source}" if route.source != dest else ""

    def _answer(self, dest: str, route: Route, moved: bool) -> None:
        """The neighbours whose question for `dest` this host passed on: told a number as new once
        there is one; their question passed on again to a new next hop (it may have been lost with
        the line to the last one)."""
        waiting = self.answer.get(dest, {})
        for peer, (seq, source) in list(waiting.items()):
            if peer == route.via:  # (the asker is the way there now: its question is moot)
                del waiting[peer]
            elif route.seq is not None and source == route.source and not newer(seq, route.seq):
                del waiting[peer]
                self.told.get(peer, {}).pop(dest, None)
                self.pending.setdefault(peer, set()).add(dest)
            elif moved and route.reachable and route.via in self.sequenced and route.via != peer:
                self._ask(route.via, dest, source, seq)

    def _tell_all(self, dest: str) -> None:
        for pending in self.pending.values():
            pending.add(dest)

    # -- numbers asked for (section 3a) ------------------------------------------------------------
    def _on_ask(self, peer: str, dest: str, source: str, seq: int) -> None:
        """`peer` has no feasible route to `dest` and asks `source` for number `seq` or newer: the
        source moves its number on; a host whose route is as new tells it again; one whose route
        is older passes the question on to its next hop."""
        if source == self.host:
            if dest != self.host and dest not in self.spoken:
                return  # (not a destination this host speaks for: a confused or hostile neighbour)
            if dest == self.host and not newer(self.seq, seq):  # (unless its own is newer: it may be
                self.seq = seq  # half the numbers away after a restart, and then neither is newer)
            elif dest != self.host and not newer(self.spoken[dest], seq):
                self.spoken[dest] = seq
            self.told.get(peer, {}).pop(dest, None)  # (a newer number alone is news only to the asker)
            self.pending.setdefault(peer, set()).add(dest)
            return
        route = self.best.get(dest)
        if route is None or not route.reachable or route.via == peer or route.via is None:
            return
        if route.seq is not None and route.source == source and not newer(seq, route.seq):
            self.told.get(peer, {}).pop(dest, None)
            self.pending.setdefault(peer, set()).add(dest)
        elif route.via in self.sequenced:  # (next hops never loop: the question reaches the source)
            self._ask(route.via, dest, source, seq)
            waiting = self.answer.setdefault(dest, {})
            if peer not in waiting or waiting[peer][1] != source or newer(seq, waiting[peer][0]):
                waiting[peer] = (seq, source)  # (a question for an older number does not replace it)

    def _ask(self, peer: str, dest: str, source: str, seq: int) -> None:
        """Ask `peer` for number `seq` of `source` or newer, unless a newer one is to be asked of
        it already: a question for an older number never replaces one for a newer (the asker
        of the newer would wait for an answer that nobody then owes it)."""
        asks = self.asks.setdefault(peer, {})
        if (dest, source) not in asks or newer(seq, asks[dest, source]):
            asks[dest, source] = seq

    # -- the choice ----------------------------------------------------------------------------
    def _is_feasible(self, dest: str, h: Heard) -> bool:
        best = self.feasible.get((dest, h.source))
        return h.seq is not None and (best is None or newer(h.seq, best[0]) or (h.seq == best[0] and h.dist < best[1]))

    def _choose(self, dest: str) -> tuple[Route, list[tuple[str, Heard, int]]]:
        """The best route to `dest`, and what sequenced neighbours tell of it that this host may
        not take (not feasible): (neighbour, what it said, the distance through it), for
        `_ask_for_better`. One walk of the neighbours for both."""
        if dest in self.static:
            return Route(dest, self.static[dest], 1 if self.static[dest] == dest else NO_ROUTE, "static"), []
        if dest in self.direct_only:
            return Route(dest, dest, 1, "neighbour"), []
        unfeasible: list[tuple[str, Heard, int]] = []
        if self.learn:
            current = self.best.get(dest)
            kept = current.via if current is not None else None
            best: tuple[int, bool, str, Heard | None] | None = None
            for peer in self.up:
                h = self.heard.get(peer, _NOTHING).get(dest)
                cost = 1 + CALL_COST if peer in self.calls else 1
                if peer == dest:  # a direct line ends at its destination: never a loop
                    dist = cost
                    if h is None or h.seq is None:
                        h = None
                    elif peer in self.sequenced and not self._is_feasible(dest, h):
                        unfeasible.append((peer, h, dist))
                elif h is None or h.dist >= NO_ROUTE:
                    continue
                elif h.seq is None:  # a version-1 peer's distance
                    dist = h.dist + cost
                    if dist >= INFINITY:
                        continue
                else:
                    dist = h.dist + cost
                    if not self._is_feasible(dest, h):
                        if peer in self.sequenced:
                            unfeasible.append((peer, h, dist))
                        continue
                    if dist > self.limit:
                        continue
                candidate = (dist, peer != kept, peer, h)
                if best is None or candidate[:3] < best[:3]:
                    best = candidate
            if best is not None:
                dist, _, peer, h = best
                fields = (dest, peer, dist, "neighbour" if peer == dest else "learned",
                          h.seq if h else None, h.source if h else "")
                same = current == fields  # (most updates leave most routes as they are: no new Route)
                return (current if same and current is not None else Route(*fields)), unfeasible
        if dest in self.neighbours:
            return Route(dest, dest, (1 + CALL_COST * (dest in self.calls)) if dest in self.up else NO_ROUTE,
                         "neighbour"), unfeasible
        if DEFAULT in self.static:
            return Route(dest, self.static[DEFAULT], NO_ROUTE, "default"), unfeasible
        return Route(dest, None, NO_ROUTE, "none"), unfeasible

    def _ask_for_better(self, dest: str, route: Route, unfeasible: list[tuple[str, Heard, int]]) -> None:
        """A neighbour tells a route this host may not take (not feasible) but would, being shorter
        than the one it has or than none: ask that neighbour for a number newer than this host's
        best, of that route's source. Once, until the neighbour says more or the route moves.
        (Choosing the route only made the feasibility condition stricter: `unfeasible` stands.)"""
        for peer, h, dist in unfeasible:
            if dist >= route.dist or dist > self.limit:
                continue
            best = self.feasible.get((dest, h.source))
            seq = (best[0] if best else h.seq or 0) + 1 & (SEQ_MOD - 1)  # (h.seq is a number here)
            asked = self.asked.setdefault(dest, {})
            if asked.get((peer, h.source)) != (seq, h):
                asked[(peer, h.source)] = (seq, h)
                self._ask(peer, dest, h.source, seq)

    def _recompute(self, now: float, dests: Iterable[str] | None = None) -> list[Change]:
        """The routes to `dests` again (an update changes only the destinations it names), or every
        route (a line came or went); the hosts learned for the first time are remembered."""
        names = {d for heard in self.heard.values() for d in heard} if dests is None else set(dests)
        learned = {d for d in names - self.known if d != self.host and any(
            h.dist < NO_ROUTE for heard in self.heard.values() if (h := heard.get(d)) is not None)}
        self.known |= learned
        for dest in self.known if dests is None else sorted(names & self.known):
            route, unfeasible = self._choose(dest)
            if route.seq is not None:  # what this host may tell of the source from now on
                best = self.feasible.get((dest, route.source))
                if best is None or newer(route.seq, best[0]) or (route.seq == best[0] and route.dist < best[1]):
                    self.feasible[(dest, route.source)] = (route.seq, route.dist)
            last = self.best.get(dest)
            if dest in self.answer:
                self._answer(dest, route, last is None or last.via != route.via)
            if last != route:
                self.best[dest] = route
                self._tell_all(dest)
                self.asked.pop(dest, None)  # (the route moved: what would be better is asked for again)
                if last is None or (last.via, last.dist, last.kind) != (route.via, route.dist, route.kind):
                    self._since.pop(dest, None)  # (kept in the order they moved: moved_since reads the last ones)
                    self._since[dest] = self.moved = now
                    self.changed.append(route)
            if unfeasible and route.kind != "static" and route.via not in self.direct_only:
                self._ask_for_better(dest, route, unfeasible)
        return [ch.add_known_host(d) for d in sorted(learned)]


_NOTHING: dict[str, Heard] = {}


def decode_vector(data: bytes) -> dict[str, int]:
    """Raises ValueError on anything but `HOST=N` tokens of 2-character ids."""
    out = {}
    for token in data.decode("ascii").split():
        host, _, dist = token.partition("=")
        if len(host) != 2 or not dist.isdigit():
            raise ValueError(f"bad route token {token!r}")
        out[host] = int(dist)
    return out


_ENTRY = re.compile(r"(\S\S)=(?:-|(\d{1,5})/(\d{1,5})(?:@(\S\S))?)")
_ASK = re.compile(r"\?(\S\S)/(\d{1,5})(?:@(\S\S))?")


def decode_sequenced(data: bytes) -> tuple[dict[str, Heard], dict[tuple[str, str], int]]:
    """A sequenced update (section 3a): `DD=3/7`, `DD=3/7@BB`, `DD=-` and `?DD/8[@BB]` tokens.
    Raises ValueError on anything else."""
    said: dict[str, Heard] = {}
    asks: dict[tuple[str, str], int] = {}
    for token in data.decode("ascii").split():
        key, value = _token(token)
        if isinstance(value, Heard):
            said[key] = value
        else:
            asks[key] = value
    return said, asks


@functools.lru_cache(maxsize=1 << 16)
def _token(token: str) -> tuple:
    """One token: (destination, what is heard of it), or ((destination, source), the number asked
    for). Cached: a network's updates repeat the same tokens host after host."""
    if (m := _ENTRY.fullmatch(token)) is not None:
        dest, dist, seq, source = m.groups()
        if dist is None:
            return dest, Heard(NO_ROUTE, None, dest)
        if int(dist) >= NO_ROUTE or int(seq) >= SEQ_MOD:
            raise ValueError(f"route token {token!r} out of range")
        return dest, Heard(int(dist), int(seq), source or dest)
    if (m := _ASK.fullmatch(token)) is not None and int(m[2]) < SEQ_MOD:
        return (m[1], m[3] or m[1]), int(m[2])
    raise ValueError(f"bad route token {token!r}")
