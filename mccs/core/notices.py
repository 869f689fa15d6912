"""Expiry and notices: a message that cannot arrive in time is returned, and a sender that asked
is told when its message was taken.

A message waits on the way at most its ttl (`[host] ttl`, or per SEND). One whose time passes on
a SEND_LIST (at its origin or at a transit host), or that reaches the hop limit, is removed and
an *undeliverable* notice goes back to its sender; one sent with `receipt` gets a *delivered*
notice once the destination process has confirmed its RECV. A notice is an ordinary message
from the host's daemon (FROM_ID host + `MCCS`, USER_ID the MSG_ID it is about, JSON text), so
it is routed, stored and deduplicated like any other, and never gets a notice of its own.

A notice is compact (a reason code, not a sentence: the details are in the trace) so that it fits
every line it may cross: every line of this version takes a daemon's message of up to DAEMON_ROOM
bytes whatever its max_message (mccs.core.machine), and a peer of an earlier version takes the default
max_message, which DAEMON_ROOM is. `REASONS` says what each code means, for people.

A message that already has its end-to-end number (PSEQ) may have a successor on the way whose
delivery waits for it; it is therefore not dropped but turned into a VOID: no message text, the
same place in the (origin, destination) order. It travels on, and the destination skips it.

Who tells the sender: a numbered message has left its origin, and a copy of it may be elsewhere
(an acknowledgement lost to a cut or a kill, a route that moved): it may even have been delivered.
So the host that gives it up makes no notice; its void carries the reason code as its text
(`ttl`, `too large`, `purged`), and the *destination* makes the notice when the void takes the
message's place there, which it does only if the message itself never came (else the void is a
duplicate and dropped). Each message is so delivered or returned, never both. If the void itself
cannot reach the destination within a further ttl, the host where it waits then makes the notice.
An unnumbered message never left its origin: the origin tells at once. A message that met the hop
limit (a routing loop) is told at once where it met it, its void owing nothing. (In a stream
protected end to end a void that owes nothing is told too, mccs.core.receiver: such a message is
then told twice.)
"""
from __future__ import annotations

import json
import logging
from typing import Protocol

from checkpoint import changes as ch
from checkpoint.changes import Stored, Table
from linedrivers.ids import host_of

from mccs.core.effects import Effects
from mccs.core.envelope import NOTICE, REPLY, VOID
from mccs.core.lists import MSGBLOK
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.notices")

NAME = "MCCS"  # the daemon's own process name: notices come from it, no process may take it
#: The largest message a daemon makes (a notice, a control message): every line takes one this
#: long, whatever the max_message at either end (the default max_message, for older peers).
DAEMON_ROOM = 128
#: A notice's `reason` codes, and what each means ({host}: the host that made the notice).
REASONS = {
    "taken": "its process took it",
    "ttl": "its ttl passed while it waited at {host}",
    "hop limit": "it reached the hop limit at {host}",
    "purged": "purged by the operator at {host}",
    "discarded": "no process attached at {host} (discard)",
    "late reply": "its request stopped waiting",
    "too large": "the next host after {host} cannot take a message this long (its max_message)",
    "voided": "a host on its way gave it up without saying why (or forged its void); {host} passed its place",
    "refused": "{host} refused it: its end-to-end protection, or the process's accept_from (see its trace)",
}


class Identified(Protocol):
    """What names a message in a trace event: a MSGBLOK, or an Image as a line delivered it."""

    @property
    def origin(self) -> str: ...
    @property
    def msg_id(self) -> int: ...
    @property
    def from_id(self) -> str: ...
    @property
    def to_id(self) -> str: ...
    @property
    def user_id(self) -> int: ...


def fields(m: Identified) -> dict:
    """A message's identity in trace events."""
    return {"origin": m.origin, "msg_id": m.msg_id, "from_id": m.from_id, "to_id": m.to_id, "user_id": m.user_id}


def is_daemon(pid: str) -> bool:
    """Is the process id a host's daemon (its notices and control messages come from it)?"""
    return pid[2:].rstrip() == NAME


def notice_text(kind: str, msg_id: int, to_id: str, reason: str, wall: float) -> bytes:
    """A notice's MESSAGE: compact JSON, at most DAEMON_ROOM bytes (tests/unit/test_routing.py checks it)."""
    return json.dumps({"notice": kind, "msg_id": msg_id, "to_id": to_id, "reason": reason, "at": round(wall, 3)},
                      separators=(",", ":")).encode()


def owed(void: MSGBLOK) -> str:
    """The reason code a void carries when its message's undeliverable notice is still to be made
    ("" if none: a void of a notice or a reply, one told already, or one from an older MCCS)."""
    text = bytes(void.data) if void.flags & VOID and isinstance(void.data, (bytes, bytearray, memoryview)) else b""
    reason = text.decode("ascii", "replace")
    return reason if reason in REASONS else ""


def describe(notice: dict, host: str) -> str:
    """A notice for people: its kind and what its reason code means (`host`: where it was made)."""
    reason = notice.get("reason", "")
    return f"{notice.get('notice')}: {REASONS.get(reason, reason).format(host=host)}"


class Notices:
    def __init__(self, hs: HostState):
        self.host, self.ttl = hs.id, hs.cfg.ttl
        self.lists, self.ids, self.seqs, self.counters = hs.lists, hs.ids, hs.seqs, hs.counters

    def expire(self, fx: Effects, wall: float) -> None:
        """Every block on SEND_LIST whose time has passed, in the pass; a void whose destination
        did not take its place within a further ttl owes its notice no longer: it is made here."""
        for blk in self.lists.send.expired(wall):
            if blk.flags & VOID:
                self.settle(fx, blk, wall)
                fx.change(ch.set_void(Table.SEND_LIST, blk.seq, blk.flags))
            else:
                self.drop(fx, blk, "ttl", wall)

    def drop(self, fx: Effects, blk: MSGBLOK, why: str, wall: float) -> None:
        """A block leaves SEND_LIST undelivered, its sender told; a numbered one stays as a VOID."""
        if self.returned(fx, blk, why, wall):
            assert not isinstance(blk.data, Stored)  # returned() made it a void: its text is the reason code owed
            fx.change(ch.set_void(Table.SEND_LIST, blk.seq, blk.flags, blk.data, blk.expires))
            if blk.expires:
                self.lists.send.expire_at(blk)
        else:
            self.lists.send.remove(blk)
            if blk.origin == self.host:
                self.ids.release(blk.msg_id)
            fx.change(ch.delete_block(Table.SEND_LIST, blk.seq))

    def undeliverable(self, fx: Effects, blk: MSGBLOK, why: str, wall: float, tell: bool = True) -> None:
        """A message that will not be delivered: traced, and (`tell`) its sender told (a notice,
        a void or a reply gets no notice of its own). `why` is a code of REASONS, in the trace and
        the notice."""
        self.counters[why if why in ("purged", "discarded", "too large") else "expired"] += 1
        fx.trace("msg", "expired", reason=why, hops=blk.hops, **fields(blk))
        if tell and not blk.flags & (NOTICE | VOID | REPLY):
            self._notice(fx, blk, "undeliverable", why, wall)

    def untaken(self, fx: Effects, blk: MSGBLOK, why: str, wall: float) -> None:
        """A block leaves RECV_LIST without a RECV, its sender told (as undeliverable)."""
        self.lists.recv.remove(blk)
        if blk.origin == self.host:
            self.ids.release(blk.msg_id)
        fx.change(ch.delete_block(Table.RECV_LIST, blk.seq))
        self.undeliverable(fx, blk, why, wall)

    def returned(self, fx: Effects, blk: MSGBLOK, why: str, wall: float) -> bool:
        """A message that will not be delivered, turned into a VOID if its place in the order
        must be kept (True: it goes on as a void). A numbered one's void owes its notice to the
        destination (module docstring), unless it met the hop limit."""
        if blk.flags & VOID:  # a void met the hop limit: what it owes is told here
            self.undeliverable(fx, blk, why, wall)
            self.settle(fx, blk, wall)
            return False
        owes = bool(blk.pseq) and why != "hop limit" and not blk.flags & (NOTICE | REPLY)
        self.undeliverable(fx, blk, why, wall, tell=not owes)
        if not blk.pseq:
            return False
        blk.data, blk.expires, blk.flags = (why.encode(), wall + self.ttl, VOID) if owes else (b"", 0.0, VOID)
        blk.seal = b""  # (its end-to-end trailer went with its text: a void is not protected)
        return True

    def settle(self, fx: Effects, void: MSGBLOK, wall: float) -> None:
        """A void whose message's notice is owed (its text, a reason code) and now made here:
        at the destination, as it takes the message's place; elsewhere, when it cannot get there."""
        reason = owed(void)
        if reason:
            self.counters["returned_by_void"] += 1
            self._notice(fx, void, "undeliverable", reason, wall)
        void.data, void.expires = b"", 0.0

    def refused(self, fx: Effects, about: MSGBLOK, wall: float) -> None:
        """A message this host refused (mccs.core.receiver: traced there): its claimed sender is told."""
        self._notice(fx, about, "undeliverable", "refused", wall)

    def delivered(self, fx: Effects, blk: MSGBLOK, wall: float) -> None:
        """Its process confirmed the RECV of a message sent with `receipt`."""
        if not blk.flags & NOTICE:
            self._notice(fx, blk, "delivered", "taken", wall)

    def _notice(self, fx: Effects, about: MSGBLOK, kind: str, reason: str, wall: float) -> None:
        self.message(fx, about.from_id, about.msg_id, notice_text(kind, about.msg_id, about.to_id, reason, wall),
                     wall, kind)

    def message(self, fx: Effects, to_id: str, user_id: int, text: bytes, wall: float, kind: str,
                priority: int = 0, ttl: float | None = None, flags: int = 0) -> MSGBLOK | None:
        """A message from this host's daemon (FROM_ID host + MCCS), flagged NOTICE so it never gets
        a notice of its own: on RECV_LIST if for this host, else on SEND_LIST; None if no MSG_ID
        is free (the pass must go on: it is counted and logged, not made)."""
        local = host_of(to_id) == self.host
        seq = self.seqs.take()
        try:
            msg_id, id_changes = self.ids.allocate(host_of(to_id), seq)
        except RuntimeError:
            self.counters["notices_not_made"] += 1
            fx.trace("msg", "notice_not_made", notice=kind, reason="no free MSG_ID", to_id=to_id, user_id=user_id)
            log.error("%s: no free MSG_ID for a %s message (USER_ID %d) to %s: not sent", self.host, kind, user_id,
                      to_id.rstrip())
            return None
        blk = MSGBLOK(seq, to_id, self.host + NAME, msg_id, user_id, text, wall,
                      expires=0.0 if local else wall + (ttl or self.ttl), flags=NOTICE | flags, priority=priority)
        fx.change(*id_changes, ch.add_block(Table.RECV_LIST if local else Table.SEND_LIST, blk))
        fx.trace("msg", "accepted", notice=kind, **fields(blk))
        self.counters["notices"] += 1
        if local:
            self.lists.arrive(blk)
            fx.trace("msg", "received", notice=kind, **fields(blk))
        else:
            self.lists.send.add(blk)
        return blk
