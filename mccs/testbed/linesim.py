"""In-memory serial line for testing line state machines (sans-I/O), on a virtual clock.

A `Channel` joins two machines (sides "a" and "b") with seeded impairments applied to the
byte stream per write; a `Harness` drives both machines as the daemon will (start, send while
room() > 0, confirm after MessageReceived, sign on again after LineDown and re-queue `unacked`,
drop duplicates across sign-ons by (origin, MSG_ID)), advancing virtual time straight to the
next deadline or arrival. No threads, no real time. Protocol-generic: it only uses the
interface of docs/DESIGN.md 4.0, so AsyncLine and BscLine are tested the same way.

    res = run_pair(lambda: AsyncLine("AA", "BB"), lambda: AsyncLine("BB", "AA"),
                   make_images("AA", "BB", 1000), make_images("BB", "AA", 1000),
                   channel=Channel(seed=1, ber=1e-3, drop=0.01))
    res.check()        # exactly once and in order, both ways (AssertionError with a diff if not)
"""
from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from linedrivers.events import LineDown, LineUp, MessageAcked, MessageReceived, PeerRefused
from linedrivers.image import encode, key_of
from mccs.testbed.linesim_channel import Channel, Impairments, Pipe, PipeStats

# The channel's names stay importable from here, where the tests and tools have always found them.
__all__ = ["SIDES", "Clock", "Impairments", "PipeStats", "Pipe", "Channel", "make_images", "DuplicateWindow",
           "Side", "PairResult", "Harness", "run_pair"]

SIDES = ("a", "b")


class Clock:
    """Virtual time: only ever moves forward, and only when told."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def advance(self, to: float) -> float:
        self.now = max(self.now, to)
        return self.now


def make_images(src: str, dst: str, n: int, size: int = 128, *, seed: int = 0,
                first_msg_id: int = 1, random_size: bool = False) -> list[bytes]:
    """`n` valid message images from process `src`+"P" to `dst`+"Q" (hosts or process ids),
    MSG_IDs counting up from `first_msg_id` (wrapping at 65536), seeded binary data."""
    rng = random.Random(f"{seed}/{src}/{dst}")
    src_id = src if len(src) > 2 else src + "P"
    dst_id = dst if len(dst) > 2 else dst + "Q"
    return [encode(dst_id, src_id, (first_msg_id + i) & 0xFFFF, 0,
                   rng.randbytes(rng.randint(0, size) if random_size else size))
            for i in range(n)]


class DuplicateWindow:
    """The daemon's duplicate filter: the last `size` (origin, MSG_ID) keys per origin."""

    def __init__(self, size: int = 8192):
        self.size = size
        self._keys: dict[str, tuple[deque, set]] = {}

    def seen(self, key: tuple[str, int]) -> bool:
        """True if `key` is a duplicate; otherwise remember it and return False."""
        order, keys = self._keys.setdefault(key[0], (deque(), set()))
        if key[1] in keys:
            return True
        order.append(key[1])
        keys.add(key[1])
        if len(order) > self.size:
            keys.discard(order.popleft())
        return False


@dataclass
class Side:
    """What the harness (the stand-in daemon) keeps for one end of the line."""
    name: str
    factory: Callable[[], Any]
    machine: Any = None
    starts: bool = True                # calls start() itself (else waits for the peer)
    queue: deque = field(default_factory=deque)       # images not yet handed to the machine
    in_machine: deque = field(default_factory=deque)  # handed over, not yet acknowledged
    sent: list = field(default_factory=list)          # everything ever queued, in order
    received: list = field(default_factory=list)      # distinct images delivered, in order
    recv_list: deque = field(default_factory=deque)   # received, not yet consumed (for busy)
    acked: list = field(default_factory=list)
    duplicates: int = 0
    ups: int = 0
    downs: list = field(default_factory=list)         # LineDown reasons, in order
    refused: list = field(default_factory=list)       # PeerRefused peers
    unacked_mismatches: list = field(default_factory=list)  # (time, expected, got) protocol bugs
    ack_out_of_order: int = 0
    up: bool = False
    busy: bool = False
    restarts: int = 0
    stopped: bool = False              # Harness.stop() was called: no automatic sign-on
    retired_counters: list = field(default_factory=list)  # counters of replaced machines
    dupwin: DuplicateWindow = field(default_factory=DuplicateWindow)
    priorities: dict = field(default_factory=dict)  # image -> its priority, if not 0

    @property
    def counters(self) -> dict:
        """The machine's counters, summed over every machine this side has had."""
        total: dict = {}
        for c in self.retired_counters + [dict(self.machine.counters)]:
            for k, v in c.items():
                if isinstance(v, (int, float)):
                    total[k] = total.get(k, 0) + v
        return total

    def idle(self) -> bool:
        return not self.queue and not self.in_machine


@dataclass
class PairResult:
    """What a run produced: per side (`res.a`, `res.b`, or `res["a"]`) the images received in
    order, acks, downs, counters; the event log as (time, side, event); the channel."""
    a: Side
    b: Side
    events: list
    time: float
    steps: int
    channel: Channel
    finished: bool  # everything sent was acknowledged (else `until`/`max_steps` ran out)

    def __getitem__(self, side: str) -> Side:
        return self.a if side == "a" else self.b

    def check(self) -> None:
        """Assert exactly-once, in-order delivery both ways and a consistent `unacked`."""
        for src, dst in (self.a, self.b), (self.b, self.a):
            assert not src.unacked_mismatches, (
                f"{src.name}: LineDown.unacked differed from what was held: {src.unacked_mismatches[:3]}")
            got = dst.received
            if got != src.sent:
                keys = [key_of(i) for i in got]
                first = next((i for i, (x, y) in enumerate(zip(got, src.sent)) if x != y), min(len(got), len(src.sent)))
                raise AssertionError(
                    f"{src.name}->{dst.name}: {len(got)} received of {len(src.sent)} sent "
                    f"(finished={self.finished}, t={self.time:.1f}); first difference at #{first}: "
                    f"got {keys[first:first + 3]} expected {[key_of(i) for i in src.sent[first:first + 3]]}")
            assert len(src.acked) == len(src.sent), f"{src.name}: {len(src.acked)} acked of {len(src.sent)}"

    def of(self, side: str, kind: type) -> list:
        """The events of one type that one side reported."""
        return [e for _, s, e in self.events if s == side and isinstance(e, kind)]


class Harness:
    """Drives two machines over a Channel on a virtual clock, as the daemon would.

    `factory_a()` / `factory_b()` build a machine (again on `restart()`). `start` names the
    sides that call start() themselves. After LineDown a side signs on again after `backoff`
    seconds unless the peer brought the line up first. `confirm_delay` is the daemon's commit
    time before confirm(). `recv_capacity`/`drain_rate` model a bounded RECV_LIST emptied at
    `drain_rate` messages a second: full -> set_busy(True), room again -> set_busy(False).
    `at(t, fn)` runs fn(harness) at virtual time t (restart a side, cut the line, ...).
    """

    def __init__(self, factory_a: Callable[[], Any], factory_b: Callable[[], Any], *,
                 channel: Channel | None = None, start: Iterable[str] = SIDES, backoff: float = 0.5,
                 confirm_delay: float = 0.0, recv_capacity: int | None = None,
                 drain_rate: float | None = None, keep_events: bool = True, now: float = 0.0):
        self.channel = channel or Channel()
        self.clock = Clock(now)
        starters = set(start)
        self.sides = {n: Side(n, f, f(), n in starters) for n, f in zip(SIDES, (factory_a, factory_b))}
        self.backoff, self.confirm_delay = backoff, confirm_delay
        self.recv_capacity, self.drain_rate = recv_capacity, drain_rate
        self.keep_events = keep_events
        self.events: list = []
        self.steps = 0
        self._timers: list = []  # heap of (time, n, fn)
        self._n = itertools.count()
        self._started = False

    @property
    def now(self) -> float:
        return self.clock.now

    def __getitem__(self, side: str) -> Side:
        return self.sides[side]

    def at(self, t: float, fn: Callable[["Harness"], Any]) -> None:
        heapq.heappush(self._timers, (t, next(self._n), fn))

    def send(self, side: str, images: Iterable[bytes], priority: int = 0) -> None:
        """Queue images on `side` (the daemon's SEND_LIST), handed over as room() allows, those of
        higher `priority` first, as the daemon's Message-Sender does (and a machine sends one of
        higher priority before those it has not sent yet)."""
        images = list(images)
        s = self.sides[side]
        s.priorities.update(dict.fromkeys(images, priority))
        at = next((i for i, img in enumerate(s.queue) if s.priorities.get(img, 0) < priority), len(s.queue))
        for k, img in enumerate(images):
            s.queue.insert(at + k, img)
        s.sent.extend(images)

    def restart(self, side: str) -> None:
        """The side's daemon restarts: a fresh machine; what it held goes back in front."""
        s = self.sides[side]
        s.retired_counters.append(dict(s.machine.counters))
        s.machine = s.factory()
        s.queue.extendleft(reversed(s.in_machine))
        s.in_machine.clear()
        s.up = s.busy = False
        s.restarts += 1
        self._update_busy(s)  # the new machine must hear that RECV_LIST is still full
        if s.starts:
            s.machine.start(self.now)

    def stop(self, side: str) -> None:
        """The side signs off (machine.stop()) and, like a daemon shutting a line, does not sign
        on again by itself; a sign-on from the peer still brings it up."""
        s = self.sides[side]
        s.stopped = True
        s.machine.stop(self.now)

    # --- driving -------------------------------------------------------------------------
    def _begin(self) -> None:
        if not self._started:
            self._started = True
            for s in self.sides.values():
                if s.starts:
                    s.machine.start(self.now)
            if self.drain_rate:
                self.at(self.now + 1 / self.drain_rate, self._drain)

    def _drain(self, _h: "Harness") -> None:
        assert self.drain_rate  # scheduled only with a drain_rate
        for s in self.sides.values():
            if s.recv_list:
                s.recv_list.popleft()
            self._update_busy(s)
        self.at(self.now + 1 / self.drain_rate, self._drain)

    def _update_busy(self, s: Side) -> None:
        if self.recv_capacity is None:
            return
        full = len(s.recv_list) >= self.recv_capacity
        if full != s.busy:
            s.busy = full
            s.machine.set_busy(full)

    def _resign(self, side: str) -> None:
        s = self.sides[side]
        if not s.up and not s.stopped:
            s.machine.start(self.now)

    def _service(self, s: Side) -> bool:
        """Feed, collect events, confirm, write: one pass over one side. True if anything happened."""
        m, now = s.machine, self.now
        evs = m.events()
        got = False
        for ev in evs:
            if self.keep_events:
                self.events.append((now, s.name, ev))
            if isinstance(ev, MessageReceived):
                got = True
                if s.dupwin.seen(key_of(ev.image)):
                    s.duplicates += 1
                else:
                    s.received.append(ev.image)
                    s.recv_list.append(ev.image)
            elif isinstance(ev, MessageAcked):
                self._acked(s, ev.image)
            elif isinstance(ev, LineUp):
                s.up = True
                s.ups += 1
            elif isinstance(ev, LineDown):
                self._down(s, ev)
            elif isinstance(ev, PeerRefused):
                s.refused.append(ev.peer)
        if got:
            self._update_busy(s)
            if self.confirm_delay:
                self.at(now + self.confirm_delay, lambda h: m.confirm())
            else:
                m.confirm()
        fed = 0  # after the events, so a LineDown's unacked go back before anything new goes in
        if s.queue:
            for _ in range(min(m.room(), len(s.queue))):
                img = s.queue.popleft()
                priority = s.priorities.get(img, 0)
                if priority:
                    m.send(img, priority)
                else:  # as a machine of the older interface takes it
                    m.send(img)
                s.in_machine.append(img)
                fed += 1
        out = m.data_to_send()
        if out:
            self.channel.outof(s.name).write(out, now)
        return bool(fed or evs or out)

    def _acked(self, s: Side, image: bytes) -> None:
        s.acked.append(image)
        if s.in_machine and s.in_machine[0] == image:
            s.in_machine.popleft()
            return
        s.ack_out_of_order += 1
        try:
            s.in_machine.remove(image)
        except ValueError:
            pass

    def _down(self, s: Side, ev: LineDown) -> None:
        s.up = False
        s.downs.append(ev.reason)
        if list(ev.unacked) != list(s.in_machine):
            s.unacked_mismatches.append((self.now, [key_of(i) for i in s.in_machine],
                                         [key_of(i) for i in ev.unacked]))
        s.queue.extendleft(reversed(list(ev.unacked)))
        s.in_machine.clear()
        self.at(self.now + self.backoff, lambda h: h._resign(s.name))

    def _settle(self) -> None:
        """Let both machines react to each other at this instant until nothing changes."""
        for _ in range(1000):
            if not any([self._service(s) for s in self.sides.values()]):
                return
        raise RuntimeError(f"machines never settle at t={self.now}")

    def next_time(self) -> float | None:
        times = [self._timers[0][0]] if self._timers else []
        for s in self.sides.values():
            times.extend(d for d in (s.machine.next_deadline(), _next_write(s.machine)) if d is not None)
            a = self.channel.towards(s.name).next_arrival()
            if a is not None:
                times.append(a)
        return min(times) if times else None

    def step(self, until: float = math.inf) -> bool:
        """Advance to the next arrival, deadline or timer (at most `until`) and handle it.
        Returns False when nothing is left to happen before `until`."""
        self._begin()
        self._settle()
        t = self.next_time()
        if t is None or t > until:
            self.clock.advance(until if until != math.inf else self.now)
            return False
        now = self.clock.advance(t)
        self.steps += 1
        while self._timers and self._timers[0][0] <= now:
            heapq.heappop(self._timers)[2](self)
        for s in self.sides.values():
            data = self.channel.towards(s.name).take(now)
            if data:
                s.machine.receive_data(data, now)
        for s in self.sides.values():
            d = s.machine.next_deadline()
            if d is not None and d <= now:
                s.machine.handle_timeout(now)
            w = _next_write(s.machine)
            if w is not None and w <= now:  # paced: pieces of frames built already (AsyncLine.next_write)
                self.channel.outof(s.name).write(s.machine.paced(now), now)
        self._settle()
        return True

    def done(self) -> bool:
        """Everything queued on both sides was acknowledged."""
        return all(s.idle() for s in self.sides.values())

    def run(self, until: float = 3600.0, *, stop: Callable[["Harness"], bool] | None = None,
            settle: float = 0.0, max_steps: int = 10_000_000) -> bool:
        """Step until `stop(self)` (default: done()) holds, then `settle` seconds more, or until
        virtual time `until` / `max_steps`. True if the stop condition was met."""
        stop = stop or Harness.done
        self._begin()
        self._settle()
        met = stop(self)
        limit = self.steps + max_steps
        while not met and self.steps < limit and self.step(until):
            met = stop(self)
        if met and settle:
            end = min(until, self.now + settle)
            while self.steps < limit and self.step(end):
                pass
        return met

    def run_for(self, seconds: float) -> None:
        """Advance `seconds` of virtual time, handling everything on the way."""
        end = self.now + seconds
        self._begin()
        while self.step(end):
            pass

    def result(self, finished: bool | None = None) -> PairResult:
        return PairResult(self.sides["a"], self.sides["b"], self.events, self.now, self.steps,
                          self.channel, self.done() if finished is None else finished)


def run_pair(factory_a: Callable[[], Any], factory_b: Callable[[], Any],
             messages_a: Iterable[bytes] = (), messages_b: Iterable[bytes] = (), *,
             channel: Channel | None = None, until: float = 36000.0, settle: float = 2.0,
             max_steps: int = 10_000_000, **harness_options: Any) -> PairResult:
    """Send `messages_a` from a to b and `messages_b` from b to a at the same time until all are
    acknowledged (then `settle` seconds more, so late duplicates would show) or virtual time
    `until`. Options as for `Harness`. Call `.check()` on the result to assert delivery."""
    h = Harness(factory_a, factory_b, channel=channel, **harness_options)
    h.send("a", messages_a)
    h.send("b", messages_b)
    finished = h.run(until, settle=settle, max_steps=max_steps)
    return h.result(finished)


def _next_write(machine) -> float | None:
    """A machine's paced write time (a machine of the older interface has none)."""
    return machine.next_write() if hasattr(machine, "next_write") else None
