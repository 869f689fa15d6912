"""The Message-Receiver (paper, Figure 2): what a line delivered goes where it belongs.

A message for this host goes on RECV_LIST: in order per origin when it came with a routing
envelope (`pairs`), by the duplicate window of (origin, MSG_ID) when it came over a line that
speaks docs/DESIGN.md's version 1. A message for another host, over a routing line, goes on SEND_LIST
for its next hop (store and forward). A routing update changes the routes. Every arrival is
stored in the pass that acknowledges it (durable before ACK), whatever happens to it next.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from dataclasses import dataclass

from checkpoint import changes as ch
from checkpoint.changes import Stored, Table
from linedrivers import image
from linedrivers.ids import host_of
from linedrivers.image import Image

from mccs.core import e2e, envelope, segments
from mccs.core.effects import Effects
from mccs.core.envelope import SEGMENT, VOID, Envelope, from_wire
from mccs.core.lists import MSGBLOK
from mccs.core.custody import seen_as
from mccs.core.msgids import KeyWindow
from mccs.core.control import Control
from mccs.core.notices import DAEMON_ROOM, Notices, fields, is_daemon, owed
from mccs.core.pairs import Verdict
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.receiver")

VOID_RETRY = 60.0  # seconds a void that met the hop limit twice waits before it goes round again


Incoming = Image[bytes] | Image[Stored]  # a message from a line as it goes on: whole, or made whole from
#                                        its segments (its text Stored where they were written)


UNCHECKED = 0x1000  # stored: a protected message in segments whose text is not checked yet (out of sight)
CHECK_PIECE = 1 << 16  # bytes of such a text read back at a time


@dataclass
class Arrival:
    """Where a message came from: the line's peer and protocol, for traces and counters."""
    peer: str
    proto: str
    counters: collections.Counter


@dataclass
class Checking:
    """A message in segments being checked: where it came from, as stored, its envelope, the check."""
    src: Arrival
    blk: MSGBLOK
    env: Envelope
    check: e2e.TextCheck | None  # None: restored, made again at the next pass


class MessageReceiver:
    def __init__(self, hs: HostState, dups: KeyWindow, seen: KeyWindow, notices: Notices,
                 reassembly: segments.Reassembly, control: Control):
        self.host, self.hop_limit = hs.id, hs.cfg.hop_limit
        self.max_message = max(hs.cfg.max_message, DAEMON_ROOM)  # what the lines take whole (mccs.core.machine)
        self.control = control
        self.lists, self.ids, self.dups, self.seen, self.seqs = hs.lists, hs.ids, dups, seen, hs.seqs
        self.pairs, self.routes, self.notices, self.counters = hs.pairs, hs.routes, notices, hs.counters
        self.reassembly, self.blobs = reassembly, hs.blobs
        self.keys, self.accept_signed, self.gap_wait = hs.keys, hs.cfg.accept == "signed", hs.cfg.e2e_gap_wait
        self.accept_from = {p.name: p.accept_from for p in hs.cfg.processes if p.accept_from}
        self.checking: dict[int, Checking] = {}  # messages in segments whose text is being checked, by seq

    def received(self, src: Arrival, img: bytes, routed: bool, fx: Effects, now: float, wall: float) -> None:
        try:  # a segment's text is a piece and its trailer: the whole message is checked as it completes
            m, env = envelope.unwrap(img, self.max_message + segments.SIZE) if routed \
                else (image.decode(img, self.max_message), None)
            segment = env is not None and env.flags & SEGMENT
            if not segment and len(m.data) > self.max_message:
                raise image.ImageError(f"message of {len(m.data)} bytes is over the maximum of {self.max_message}")
        except image.ImageError as e:
            src.counters["bad_images"] += 1
            log.warning("%s: dropped a bad message image from %s: %s", self.host, src.peer, e)
            return
        if not segment:
            self._whole(src, m, env, fx, now, wall)
            return
        assert env is not None  # SEGMENT is a flag of the routing envelope
        if segments.is_forget(env):
            self._forgotten(src, m, fx)
        else:
            self._segment(src, m, env, fx, now, wall)

    def _segment(self, src: Arrival, m: Image, env: Envelope, fx: Effects, now: float, wall: float) -> None:
        """A piece of a large message: stored where it belongs (acknowledged with this pass); the
        last one makes the message, which goes on as if it had come whole."""
        changes: list = []
        try:
            seg = segments.unwrap(m.data)
            whole = self.reassembly.arrive(m.key, m.to_id, seg, self.seqs.take, wall, changes, src.peer)
        except ValueError as e:  # a bad trailer, or segments.Refused
            src.counters["segments_refused"] += 1
            fx.change(*changes)
            fx.trace("msg", "refused", src.peer, src.proto, reason=str(e), **fields(m))
            log.warning("%s: refused a segment of %s/%d from %s: %s", self.host, m.origin, m.msg_id, src.peer, e)
            return
        fx.change(*changes)
        src.counters["segments"] += 1
        if whole is not None:
            made: Image[Stored] = Image(m.to_id, m.from_id, m.msg_id, m.user_id, whole.stored())
            self._whole(src, made, dataclasses.replace(env, flags=env.flags & ~SEGMENT), fx, now, wall)
            fx.change(*self.reassembly.finish(whole))

    def _forgotten(self, src: Arrival, m: Image, fx: Effects) -> None:
        """A forget: the next host before this one will not finish a transfer here (it went on by
        another route, or was given up); what is held of it is dropped now, not after the ttl."""
        try:
            f = segments.read_forget(src.peer, m.data)
        except ValueError as e:
            src.counters["bad_images"] += 1
            log.warning("%s: dropped a bad forget from %s: %s", self.host, src.peer, e)
            return
        src.counters["forgets"] += 1
        p = self.reassembly.forgotten(src.peer, (host_of(f.from_id), f.msg_id), (f.to_id, f.total, f.crc))
        if p is None:  # never started here, completed, or another sender counts on it now
            return
        self.counters["partials_forgotten"] += 1
        fx.change(*self.reassembly.drop(p))
        fx.trace("msg", "forgotten", src.peer, src.proto, bytes=p.got, total=p.total, origin=p.origin,
                 msg_id=p.msg_id, from_id=f.from_id, to_id=p.to_id)
        log.info("%s: dropped the partly received %s/%d (%d of %d bytes): %s will not finish it here", self.host,
                 p.origin, p.msg_id, p.got, p.total, src.peer)

    def _whole(self, src: Arrival, m: Incoming, env: Envelope | None, fx: Effects, now: float, wall: float) -> None:
        if env is not None and env.advert:
            assert isinstance(m.data, bytes)  # not made whole: a segment with ADVERT is a forget (segments.is_forget)
            self._advert(src, m, fx, now)
        elif host_of(m.to_id) != self.host:
            self._forward(src, m, env, fx, wall)
        else:
            try:
                m, protection, check = self._verified(m, env)
            except e2e.Refused as why:
                self._refuse(src, m, env, why, fx, wall)
                return
            if check is not None:
                assert env is not None  # (a check comes of a trailer, which an envelope carries)
                self._check_later(src, m, env, check, fx, wall)
            else:
                self._place(src, m, env, fx, wall, protection)

    def _place(self, src: Arrival, m: Incoming, env: Envelope | None, fx: Effects, wall: float, protection: int,
               stored: MSGBLOK | None = None) -> None:
        if env is not None and env.pseq:
            self._in_order(src, m, env, fx, wall, protection, stored)
        else:
            self._by_window(src, m, env, fx, wall, protection, stored)

    def _verified(self, m: Incoming, env: Envelope | None) -> tuple[Incoming, int, e2e.TextCheck | None]:
        """The message as its process will see it (a sealed one opened), the stored flag that says
        how it was protected, and for a message in segments the check of its text, to be read back
        from the checkpoint; raises e2e.Refused if this host does not take it (docs/E2E.md)."""
        protection, check = 0, None
        if env is not None and env.e2e:
            h = e2e.Header.of(m, env)
            if isinstance(m.data, Stored) != (len(env.e2e) == envelope.LARGE_SIZE):
                raise e2e.Refused("protected as a message in segments, but it came whole, or the other way", "mode")
            if isinstance(m.data, Stored):
                check = e2e.check_segments(self.keys, h, env.ttl, env.e2e, env.hops + 1)
            else:
                plain, mode = e2e.open_(self.keys, h, env.ttl, bytes(m.data), env.e2e, env.hops + 1)
                m, protection = Image(m.to_id, m.from_id, m.msg_id, m.user_id, plain), e2e.STORED[mode]
            if env.pseq and self.pairs.into.is_retired((m.origin, env.priority), env.epoch):
                raise e2e.Refused(f"numbered under an epoch {m.origin} has left (a replay)", "replay")
        elif env is None or not env.flags & VOID:  # (a void has no text to verify: it only passes a place)
            if self.accept_signed:
                raise e2e.Refused('not protected end to end (accept = "signed")', "unsigned")
            if self.keys.trusts(m.origin):
                raise e2e.Refused(f"not protected end to end, though {m.origin}'s key is trusted here", "unsigned")
        allowed = self.accept_from.get(m.to_id[2:].rstrip())
        if allowed and not (m.origin in allowed or m.from_id.rstrip() in allowed or self._answer(m, env)):
            raise e2e.Refused(f"{m.to_id.rstrip()} takes messages only from {', '.join(allowed)}", "not_accepted")
        return m, protection, check

    # -- messages in segments, protected end to end: their text is checked as it is read back ------
    def _check_later(self, src: Arrival, m: Incoming, env: Envelope, check: e2e.TextCheck, fx: Effects,
                     wall: float) -> None:
        """Stored (it is acknowledged with this pass) but out of sight (UNCHECKED) until its text,
        read back from the checkpoint piece by piece (`check_texts`), matches its SIV."""
        blk, add = self._block(src, m, env, wall, Table.RECV_LIST, protection=UNCHECKED)
        fx.change(add)
        self.checking[blk.seq] = Checking(src, blk, env, check)

    def check_again(self, blk: MSGBLOK) -> None:
        """Restore: a stored message whose text was not checked yet is checked again from its start."""
        self.checking[blk.seq] = Checking(Arrival("", "", collections.Counter()), blk, envelope.of_stored(blk), None)

    def check_texts(self, fx: Effects, wall: float) -> None:
        """Go on with the checks of texts in segments: each as far as its pieces have been read."""
        for seq, c in list(self.checking.items()):
            assert isinstance(c.blk.data, Stored)  # (only a text in segments is checked so)
            m: Incoming = Image(c.blk.to_id, c.blk.from_id, c.blk.msg_id, c.blk.user_id, c.blk.data)
            try:
                if c.check is None:  # (restored: its tag was checked before the restart)
                    c.check = e2e.check_segments(self.keys, e2e.Header.of(m, c.env), None, c.env.e2e)
                while c.check.done < c.blk.size:
                    piece = self.blobs.piece(c.blk.data, c.check.done, CHECK_PIECE)
                    if piece is None:  # read after this pass (Effects.reads)
                        break
                    c.check.update(piece)
                else:
                    if not c.check.ok():
                        raise e2e.Refused("its text does not match its tag: changed on the way")
            except e2e.Refused as why:
                del self.checking[seq]
                fx.change(ch.delete_block(Table.RECV_LIST, seq))
                self._refuse(c.src, m, c.env, why, fx, wall)
                continue
            if c.check.done >= c.blk.size:
                del self.checking[seq]
                c.blk.flags = c.blk.flags & ~UNCHECKED | e2e.STORED[c.check.mode]
                self._place(c.src, m, c.env, fx, wall, 0, c.blk)

    @staticmethod
    def _answer(m: Incoming, env: Envelope | None) -> bool:
        """A daemon's notice or a reply: about a message the process sent, whoever it went to."""
        return env is not None and bool(env.flags & envelope.NOTICE)

    def _refuse(self, src: Arrival, m: Incoming, env: Envelope | None, why: e2e.Refused, fx: Effects,
                wall: float) -> None:
        """Not delivered, and no place taken in its stream: the genuine message with the same numbers
        may still come, for e2e_gap_wait at most (never past its ttl); its stream goes on then. A
        message refused for accept_from is what it says: its place is passed at once. Traced,
        counted, and its claimed origin told."""
        src.counters["refused"] += 1
        self.counters["refused"] += 1
        self.counters[f"refused_{why.code}"] += 1
        fx.trace("msg", "refused", src.peer, src.proto, reason=why.code, detail=str(why), **fields(m))
        log.warning("%s: refused %s/%d from %s for %s (by %s): %s", self.host, m.origin, m.msg_id, m.from_id.rstrip(),
                    m.to_id.rstrip(), src.peer, why)
        if env is not None and env.pseq and why.code != "replay":
            wait = 0.0 if why.code == "not_accepted" else min(self.gap_wait, env.ttl / 10 if env.ttl else self.gap_wait)
            fx.change(*self.pairs.into.refused((m.origin, env.priority), env.epoch, env.pseq, wall + wait))
        if env is None or not env.flags & (envelope.NOTICE | VOID):
            self.notices.refused(fx, MSGBLOK(0, m.to_id, m.from_id, m.msg_id, m.user_id, b"", wall), wall)

    def _by_window(self, src: Arrival, m: Incoming, env: Envelope | None, fx: Effects, wall: float,
                   protection: int = 0, stored: MSGBLOK | None = None) -> None:
        """docs/DESIGN.md's rule: a key among the last ones received from its origin is a duplicate.
        But custody's own messages, which carry their origin's epoch without a number: a copy of one
        does no harm, and an origin restored from a backup gives their MSG_IDs again (mccs.core.custody)."""
        loose = env is not None and env.epoch != envelope.NO_EPOCH
        if m.key in self.dups and not loose:
            self._duplicate(src, m, fx, stored)
            return
        blk, add = self._stored(stored) or self._block(src, m, Envelope(), wall, Table.RECV_LIST, protection=protection)
        fx.change(*([] if loose else self.dups.add(m.origin, m.msg_id, blk.seq)), add)
        fx.trace("msg", "received", src.peer, src.proto, **fields(m))
        self._deliver(blk, fx, wall)

    def _in_order(self, src: Arrival, m: Incoming, env: Envelope, fx: Effects, wall: float, protection: int,
                  stored: MSGBLOK | None = None) -> None:
        """By the origin's end-to-end numbers; the duplicate window is kept too, so that a message
        that came once without a number (over a version-1 line) is not taken twice."""
        if self.pairs.into.renewed(m.origin, env.epoch):  # (a neighbour's new epoch was seen at sign-on too)
            log.warning("%s: %s was started afresh (epoch %s): its old MSG_IDs are forgotten", self.host, m.origin,
                        env.epoch)
            fx.change(*self.forget(m.origin))
        pair = self.pairs.into.pairs.get((m.origin, env.priority))  # in custody, its numbers alone are exact (an
        exact = pair is not None and pair.custody and pair.epoch == env.epoch  # origin restored gives ids again)
        if m.key in self.dups and not exact:
            self._duplicate(src, m, fx, stored)
            return
        blk, add = self._stored(stored) or self._block(src, m, env, wall, Table.RECV_LIST, protection=protection)
        verdict, ready, changes = self.pairs.into.arrive(blk)
        if verdict is Verdict.DUPLICATE:
            self._duplicate(src, m, fx, stored)
        else:  # (in custody, the keys an origin restored from a backup may ask about: not the window's)
            keys = self.seen.add(seen_as(m.origin, env.epoch), m.msg_id, blk.seq) if exact \
                else self.dups.add(m.origin, m.msg_id, blk.seq)
            fx.change(*keys, add)
            if not blk.flags & VOID:
                fx.trace("msg", "received", src.peer, src.proto, hops=env.hops + 1, **fields(m))
            if verdict is Verdict.HELD:
                self.counters["held_for_order"] += 1
        fx.change(*changes)
        self.ready(fx, ready, wall)

    def ready(self, fx: Effects, blocks: list[MSGBLOK], wall: float) -> None:
        """Numbered blocks whose turn came, in order (an arrival's, or a custody probe's)."""
        for blk in blocks:
            if blk.flags & VOID:  # expired on the way: its place is passed, nothing to take
                self.counters["voids"] += 1
                if not owed(blk) and self.keys.trusts(blk.origin):  # a void is not protected: in a stream
                    blk.data = b"voided"  # that is, one that owes nothing may be forged: its origin is told
                    self.counters["voids_unexplained"] += 1
                self.notices.settle(fx, blk, wall)  # the message never came: its sender is told
                fx.change(ch.delete_block(Table.RECV_LIST, blk.seq))
                self.lists.recv.left[blk.stream] += 1
            else:
                self._deliver(blk, fx, wall)

    def _deliver(self, blk: MSGBLOK, fx: Effects, wall: float) -> None:
        """A message in its place: for this daemon, or on RECV_LIST for its process."""
        if self.control.is_for_daemon(blk):
            self.control.arrived(fx, blk, wall)
        else:
            self.lists.arrive(blk)
            self.control.arrival(fx, blk, wall)

    def forget(self, origin: str) -> list[ch.Change]:
        """What was received from an origin whose checkpoint was started afresh (mccs.core.epochs)."""
        current = {seen_as(o, pair.epoch) for (o, _), pair in self.pairs.into.pairs.items() if o == origin}
        stale = [key for key in self.seen.hosts() if key.startswith(seen_as(origin, "")) and key not in current]
        return [*self.dups.forget(origin), *(c for key in stale for c in self.seen.forget(key)),
                *self.reassembly.forget(origin)]

    def _forward(self, src: Arrival, m: Incoming, env: Envelope | None, fx: Effects, wall: float) -> None:
        """Store and forward: on SEND_LIST for the next hop, acknowledged once stored here. One
        that reached the hop limit is returned, and goes on as a void if its place is needed."""
        if env is None:  # a version-1 peer cannot mean this: it sends only to its neighbour
            src.counters["misrouted"] += 1
            log.warning("%s: dropped a message for %s from %s: not for this host", self.host, m.to_id, src.peer)
            return
        blk, add = self._block(src, m, env, wall, Table.SEND_LIST, hops=env.hops + 1)
        if blk.hops >= self.hop_limit:
            self.counters["hop_limit"] += 1
            log.warning("%s: %s/%d for %s reached the hop limit (%d) coming from %s: a routing loop?", self.host,
                        blk.origin, m.msg_id, m.to_id.rstrip(), self.hop_limit, src.peer)
            voided = self.notices.returned(fx, blk, "hop limit", wall)
            if not voided and not (blk.pseq and blk.flags & VOID):
                return  # nothing waits for it at the destination
            if not voided:  # a void that went round again: it waits here and tries again later, so that
                blk.parked_until = wall + VOID_RETRY  # its successors get their turn once the loop is mended
                self.counters["voids_parked"] += 1
            blk.hops = 0
            add = ch.add_block(Table.SEND_LIST, blk)  # (a void: no text to copy)
        self.lists.send.add(blk)
        if blk.origin == self.host:  # came back round: its MSG_ID is in use here again
            self.ids.hold(blk.msg_id)
        fx.change(add)
        fx.trace("msg", "forwarded", src.peer, src.proto, via=self.routes.next_hop(blk.dest), hops=blk.hops,
                 **fields(blk))
        self.counters["forwarded"] += 1

    def _advert(self, src: Arrival, m: Image, fx: Effects, now: float) -> None:
        try:
            fx.change(*self.routes.advert(src.peer, m.data, now))
        except (ValueError, UnicodeDecodeError) as e:
            src.counters["bad_adverts"] += 1
            log.warning("%s: dropped a bad routing update from %s: %s", self.host, src.peer, e)

    def _block(self, src: Arrival, m: Incoming, env: Envelope, wall: float, table: Table,
               hops: int | None = None, protection: int = 0) -> tuple[MSGBLOK, ch.Change]:
        """The MSGBLOK of an arrival for `table`, and the change that stores it there. A large
        message's text stays where its segments were written; the row names it. A protected message
        for another host keeps its end-to-end trailer; one for this host, how it was protected."""
        src.counters["received"] += 1
        self.counters["received"] += 1
        stored = m.data if isinstance(m.data, Stored) else None
        flags = from_wire(env.flags, is_daemon(m.from_id)) | protection
        blk = MSGBLOK(self.seqs.take(), m.to_id, m.from_id, m.msg_id, m.user_id, m.data, wall,
                      env.hops if hops is None else hops, env.pseq,
                      env.epoch if env.pseq or env.epoch != envelope.NO_EPOCH else "",
                      wall + env.ttl / 10 if env.ttl else 0.0, flags, crc=stored.crc if stored else 0,
                      priority=env.priority,
                      seal=env.e2e if table is Table.SEND_LIST or protection & UNCHECKED else b"")
        if stored:
            self.blobs.later(stored)  # its last segment is written with this pass's commit
        add = ch.add_block(table, blk)
        return blk, add

    @staticmethod
    def _stored(blk: MSGBLOK | None) -> tuple[MSGBLOK, ch.Change] | None:
        """A block stored before it was placed (its text checked since): the change that shows it."""
        return None if blk is None else (blk, ch.set_flags(Table.RECV_LIST, blk.seq, blk.flags))

    def _duplicate(self, src: Arrival, m: Incoming, fx: Effects, stored: MSGBLOK | None = None) -> None:
        if stored is not None:  # (stored while its text was checked: it goes)
            fx.change(ch.delete_block(Table.RECV_LIST, stored.seq))
        src.counters["duplicates"] += 1
        fx.trace("msg", "duplicate", src.peer, src.proto, **fields(m))
