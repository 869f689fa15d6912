"""Messages between daemons: ping, and the hold and release of a process name's quota.

A message for process MCCS of a host is for its daemon: an ordinary message (routed, stored at
every hop, acknowledged, deduplicated, in order), from the sender's daemon (FROM_ID host + MCCS),
flagged NOTICE (it never gets a notice of its own), of priority 7, whose text is one JSON object
(docs/ROUTING.md, "Daemon messages"):

    {"ping": "PROC"}                        round trip to a host; the answer says whether PROC is attached
    {"pong": "PROC", "attached": true}      the answer, USER_ID = the ping's MSG_ID
    {"hold": "LEDG"}                        this host's LEDG has max_waiting messages: keep yours for it
    {"release": "LEDG"}                     it took some: send again
    {"state": ...}, {"probe": ...}, {"sync": ...}   end-to-end custody (mccs.core.custody)

A hold binds the origin for HOLD_LEASE seconds, and is told again halfway while the name is
still at its quota: a release lost with a restarted daemon delays that name's messages by a
lease at most, and loses nothing.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from checkpoint import changes as ch
from checkpoint.changes import Stored, Table

from mccs.core import custody
from mccs.core.custody import Custody
from mccs.core.effects import Effects
from mccs.core.envelope import PRIORITY_MAX
from mccs.core.lists import MSGBLOK
from mccs.core.notices import NAME, Notices, fields
from mccs.core.replies import Failed, NoAnswer, PingAnswer
from mccs.core.requests import Code
from mccs.core.sessions import Sessions
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.control")

HOLD_LEASE = 300.0  # seconds an origin keeps messages for a name at its quota without a new hold


@dataclass
class PendingPing:
    conn: int
    rid: object
    host: str
    name: str
    deadline: float  # monotonic


class Control:
    def __init__(self, hs: HostState, sessions: Sessions, notices: Notices, custody: Custody):
        self.host = hs.id
        self.quotas = {hs.id + p.name.ljust(4): p.max_waiting for p in hs.cfg.processes if p.max_waiting}  # -> cap
        self.lists, self.sessions, self.notices, self.counters = hs.lists, sessions, notices, hs.counters
        self.custody = custody
        self.pings: dict[int, PendingPing] = {}  # by the ping message's MSG_ID
        self.held: dict[str, float] = {}  # TO_ID -> wall time until which this origin keeps its messages for it
        self.holding: dict[str, dict[str, float]] = {}  # a name over its quota here -> origins told, when

    @staticmethod
    def is_for_daemon(blk: MSGBLOK) -> bool:
        return blk.to_id[2:].rstrip() == NAME

    # -- ping -----------------------------------------------------------------------------------
    def ping(self, fx: Effects, conn: int, rid: object, host: str, name: str, timeout: float, now: float,
             wall: float) -> None:
        """Ask `host`'s daemon (this one: answered at once) whether `name` is attached there."""
        if host == self.host:
            fx.reply(conn, rid, self._answer(host, name, self.sessions.attached(self.host + name)))
            return
        blk = self._send(fx, host, 0, {"ping": name.rstrip()}, wall, "ping", ttl=timeout)
        if blk is not None:
            self.pings[blk.msg_id] = PendingPing(conn, rid, host, name, now + timeout)
        else:
            fx.reply(conn, rid, Failed(Code.REFUSED, "no free MSG_ID for the ping"))

    @staticmethod
    def _answer(host: str, name: str, attached: bool | None) -> PingAnswer:
        return PingAnswer(host, name.rstrip(), attached if name.strip() else None)

    def expire(self, fx: Effects, now: float) -> float | None:
        """Pings unanswered by their deadline get "no answer"; the next deadline."""
        for msg_id, p in list(self.pings.items()):
            if p.deadline <= now:
                del self.pings[msg_id]
                fx.reply(p.conn, p.rid, NoAnswer(p.host))
        return min((p.deadline for p in self.pings.values()), default=None)

    def forget(self, conn: int) -> None:
        """A connection went away: its pings' answers are dropped when they come."""
        for msg_id in [m for m, p in self.pings.items() if p.conn == conn]:
            del self.pings[msg_id]

    # -- arrivals ---------------------------------------------------------------------------------
    def arrived(self, fx: Effects, blk: MSGBLOK, wall: float) -> None:
        """A message for this daemon, off RECV_LIST (it was stored with its arrival), acted on."""
        fx.change(ch.delete_block(Table.RECV_LIST, blk.seq))
        fx.trace("msg", "delivered", **fields(blk))  # (taken by its process: this daemon)
        if blk.pseq:  # taken: its origin's custody copy may go (mccs.core.custody)
            self.lists.recv.left[blk.stream] += 1
        origin = blk.origin
        try:
            if isinstance(blk.data, Stored):  # a daemon message is short: a large text is none
                raise ValueError(f"a text of {blk.data.size} bytes, kept in the checkpoint only")
            body = json.loads(bytes(blk.data))
            if "notice" in body:  # about a daemon message of ours (one voided on the way, in a protected stream)
                self.counters["notices_for_daemon"] += 1
                log.warning("%s: %s says our message %s to %s was %s (%s)", self.host, blk.from_id.rstrip(),
                            body.get("msg_id"), body.get("to_id"), body["notice"], body.get("reason"))
                return
            kind = next(k for k in ("ping", "pong", "hold", "release", *custody.KINDS) if k in body)
            name = body[kind]
            if not isinstance(name, str) or len(name) > (8 if kind in custody.KINDS else 4):
                raise ValueError(f"{kind} names {name!r}, not a process name or an epoch")
            if kind in custody.KINDS:
                self.custody.arrived(fx, kind, origin, body, wall)
        except (ValueError, TypeError, KeyError, StopIteration, UnicodeDecodeError, AttributeError) as e:
            self.counters["bad_daemon_messages"] += 1
            log.warning("%s: dropped a daemon message %s from %s: %s", self.host, blk.name, blk.from_id, e)
            return
        self.counters[f"{kind}s_in"] += 1
        if kind in custody.KINDS:
            return
        fx.trace("msg", "control", control=kind, name=name, origin=origin, msg_id=blk.msg_id)
        if kind == "ping":
            attached = self.sessions.attached(self.host + name.ljust(4))
            left = max(1.0, blk.expires - wall) if blk.expires else None  # no use after its ping's time
            self._send(fx, origin, blk.msg_id, {"pong": name, "attached": attached}, wall, "pong", ttl=left)
        elif kind == "pong":
            p = self.pings.get(blk.user_id)
            if p is not None and p.host == origin:  # else late: its ping has had its answer
                del self.pings[blk.user_id]
                fx.reply(p.conn, p.rid, self._answer(origin, name, bool(body.get("attached"))))
        elif kind == "hold":
            self.held[origin + name.ljust(4)] = wall + HOLD_LEASE
        else:
            self.held.pop(origin + name.ljust(4), None)

    def _send(self, fx: Effects, host: str, user_id: int, body: dict, wall: float, kind: str,
              ttl: float | None = None) -> MSGBLOK | None:
        return self.notices.message(fx, host + NAME, user_id, json.dumps(body).encode(), wall, kind,
                                    priority=PRIORITY_MAX, ttl=ttl)

    # -- quotas -----------------------------------------------------------------------------------
    def over_quota(self, to_id: str) -> bool:
        """Does the process name have its `max_waiting` messages on RECV_LIST?"""
        cap = self.quotas.get(to_id)
        if not cap:
            return False
        box = self.lists.recv.boxes.get(to_id)
        return box is not None and len(box) >= cap

    def arrival(self, fx: Effects, blk: MSGBLOK, wall: float) -> None:
        """A message from another host went on RECV_LIST: if its name is now at its quota, its
        origin is told to hold the next ones (again, when the hold it was told may run out)."""
        if blk.origin == self.host or not self.over_quota(blk.to_id):
            return
        told = self.holding.setdefault(blk.to_id, {})
        if blk.origin not in told:
            self._hold(fx, blk.to_id, blk.origin, wall)

    def _hold(self, fx: Effects, to_id: str, origin: str, wall: float) -> None:
        self.holding[to_id][origin] = wall
        self._send(fx, origin, 0, {"hold": to_id[2:].rstrip()}, wall, "hold")

    def renew(self, fx: Effects, wall: float) -> None:
        """In the pass: names below their quota again release the origins told to hold; those
        still at it tell them again before their hold runs out."""
        for to_id in list(self.holding):
            if not self.over_quota(to_id):
                for origin in self.holding.pop(to_id):
                    self._send(fx, origin, 0, {"release": to_id[2:].rstrip()}, wall, "release")
                continue
            for origin, told in list(self.holding[to_id].items()):
                if told < wall - HOLD_LEASE / 2:
                    self._hold(fx, to_id, origin, wall)

    def holds(self, blk: MSGBLOK, wall: float) -> bool:
        """Does this origin keep the block back, its destination name being over its quota there?
        Only a block not yet numbered: one with its end-to-end number must go, others wait for it."""
        return not blk.pseq and blk.origin == self.host and self.held.get(blk.to_id, 0.0) > wall

    def status(self) -> dict:
        """Names at their quota here and the origins told to hold; names held here for a quota there."""
        return {"holding": {t.rstrip(): sorted(o) for t, o in self.holding.items()},
                "held": sorted(t.rstrip() for t in self.held)}

    def next_lease_end(self, wall: float) -> float | None:
        """Seconds until the first hold runs out (then the held messages go again); those out are gone."""
        self.held = {t: end for t, end in self.held.items() if end > wall}
        return min(self.held.values()) - wall if self.held else None
