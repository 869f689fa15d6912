"""Delivery to process names besides RECV: observers, replies, dispositions, programs on demand.

A name may have several handlers (mccs.core.sessions): the one that asks first takes a message.
Observers of the name get a copy of each message that arrives for it here, at most once: a
copy lives in memory only, so one an observer has not taken when the daemon stops is lost,
and a message restored after a restart is not an arrival and is not copied again. A reply
waits for its request only: it is dropped when it comes after its request gave up, or when
the time the request gave it runs out. A `[[process]]` name with `disposition = "discard"`
drops what arrives while no handler is attached (its sender gets an undeliverable notice);
one with `start` has its program started when a message waits and no handler is attached.
Decisions are made here, in the pass; the shell starts programs and says when one exits.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from linedrivers.ids import process_id

from mccs.core.effects import Effects
from mccs.core.lists import MSGBLOK
from mccs.core.notices import Notices
from mccs.core.sessions import Sessions
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.delivery")

BACKOFF_FIRST = 1.0  # seconds before a program that took no message is started again; doubles each time


@dataclass
class Program:
    """A `[[process]] start` program: at most one runs at a time."""
    pid: str  # the process id it serves
    command: str
    backoff_max: float
    running: bool = False
    took: bool = False  # a handler of its name confirmed a message since it started
    failures: int = 0  # starts in a row that took no message
    not_before: float = 0.0  # monotonic: no new start before this


class Delivery:
    def __init__(self, hs: HostState, sessions: Sessions, notices: Notices):
        host, processes = hs.id, hs.cfg.processes
        self.host, self.buffers, self.lists, self.sessions = host, hs.cfg.buffers, hs.lists, sessions
        self.notices, self.counters = notices, hs.counters
        self.discard = {process_id(host + p.name) for p in processes if p.disposition == "discard"}
        self.programs = {prog.pid: prog for prog in (Program(process_id(host + p.name), p.start, p.backoff_max)
                                                     for p in processes if p.start)}

    def arrivals(self, fx: Effects, wall: float) -> None:
        """What came on RECV_LIST since the last pass: a late reply or a message for a discarding
        name with no handler is dropped; the rest is copied to its name's observers."""
        for blk in self.lists.arrived:
            if blk not in self.lists.recv:  # purged meanwhile
                continue
            if self.lists.recv.late(blk):
                self.notices.untaken(fx, blk, "late reply", wall)
            elif blk.to_id in self.discard and not self.sessions.attached(blk.to_id):
                self.notices.untaken(fx, blk, "discarded", wall)
            else:
                self._copy(blk)
        self.lists.arrived.clear()

    def _copy(self, blk: MSGBLOK) -> None:
        for session in self.sessions.observers.get(blk.to_id, ()):
            if len(session.copies) >= self.buffers:  # an observer that does not keep up misses the oldest
                session.copies.popleft()
                self.counters["copies_missed"] += 1
            session.copies.append(blk)
            self.lists.wait.dirty.add(session.recv_key)
            self.counters["copies"] += 1

    def late_replies(self, fx: Effects, wall: float) -> None:
        for blk in self.lists.recv.late_replies(wall):
            self.notices.untaken(fx, blk, "late reply", wall)

    # -- programs started on demand -------------------------------------------------------------
    def taken(self, pid: str) -> None:
        """A handler of `pid` confirmed a message."""
        prog = self.programs.get(pid)
        if prog is not None and prog.running:
            prog.took = True

    def start_programs(self, fx: Effects, now: float) -> None:
        """Start the program of each name with a message waiting and no handler, one at a time."""
        for prog in self.programs.values():
            box = self.lists.recv.boxes.get(prog.pid)
            if prog.running or box is None or not box.ready or self.sessions.attached(prog.pid):
                continue
            if now < prog.not_before:
                fx.wake_at(prog.not_before)
                continue
            prog.running, prog.took = True, False
            log.info("%s: starting the program of %s for %d waiting message(s): %s", self.host, prog.pid.rstrip(),
                     len(box.ready), prog.command)
            self.counters["programs_started"] += 1
            fx.start(prog.pid, prog.command)

    def exited(self, pid: str, code: int, now: float) -> None:
        """A started program ended; one that took no message is started again after a back-off."""
        prog = self.programs.get(pid)
        if prog is None or not prog.running:
            return
        prog.running = False
        if prog.took:
            prog.failures, prog.not_before = 0, now
            log.info("%s: the program of %s exited (code %d)", self.host, pid.rstrip(), code)
            return
        prog.failures += 1
        delay = min(prog.backoff_max, BACKOFF_FIRST * 2 ** (prog.failures - 1))
        prog.not_before = now + delay
        self.counters["programs_failed"] += 1
        log.warning("%s: the program of %s exited (code %d) without taking a message (%d time(s) in a row); "
                    "next start in %.1f s", self.host, pid.rstrip(), code, prog.failures, delay)

    def status(self) -> dict:
        return {p.pid[2:].rstrip(): {"running": p.running, "failures": p.failures} for p in self.programs.values()}
