"""A small thread-based driver joining a SerialPort to a line state machine.

For tests, the bench and simple tools (the daemon drives machines from its own asyncio loop).
Every call into the machine happens on the one driver thread, since machines are not
thread-safe: received bytes, timers at next_deadline(), send() and call() all go through
its inbox. Events come out on a thread-safe queue, oldest first.

    with Link(AsyncLine("AA", "BB"), "/tmp/vs/AA.BB", baudrate=115200) as link:
        link.send(image)
        event = link.get(timeout=5)
"""
from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from .events import LineDown, LineUp, MessageAcked, MessageReceived
from .image import key_of
from .port import SerialPort

log = logging.getLogger(__name__)


@dataclass
class PortChanged:
    """The port opened (is_open=True) or was lost; reported among the machine's events."""
    is_open: bool
    reason: str


class Link:
    """Drive `machine` over the port at `port_url` (keywords go to SerialPort).

    auto_confirm: call confirm() right after every MessageReceived (the received message
    counts as durable at once). autostart: call machine.start() when the port first opens.
    on_event(event, now): called on the driver thread for each event instead of queueing it,
    so it may call the machine directly (self.machine), as a daemon's loop would.
    """

    def __init__(self, machine: Any, port_url: str, *, auto_confirm: bool = True,
                 autostart: bool = True, on_event: Callable[[Any, float], None] | None = None,
                 **port_kwargs: Any) -> None:
        self.machine = machine
        self.auto_confirm, self.autostart, self.on_event = auto_confirm, autostart, on_event
        self.port = SerialPort(port_url, on_data=self._on_data, on_state=self._on_state, **port_kwargs)
        self.events: queue.Queue = queue.Queue()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._started = False

    # ---- life cycle -------------------------------------------------------------------------
    def start(self) -> "Link":
        self._thread = threading.Thread(target=self._drive, name=f"link {self.port.url}", daemon=True)
        self._thread.start()
        self.port.start()
        return self

    def close(self) -> None:
        """Close the port and stop the driver (the machine is not signed off: see stop_line)."""
        self.port.close()
        if self._thread:
            self._inbox.put(None)
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "Link":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- thread-safe calls into the machine -------------------------------------------------
    def call(self, fn: Callable[[Any, float], Any]) -> Future:
        """Run fn(machine, now) on the driver thread; its result comes back in the Future."""
        fut: Future = Future()
        self._inbox.put(("call", fn, fut))
        return fut

    def send(self, image: bytes) -> None:
        self.call(lambda m, now: m.send(image))

    def signon(self) -> None:
        """Sign on anew (after LineDown, as the daemon does)."""
        self.call(lambda m, now: m.start(now))

    def confirm(self) -> None:
        self.call(lambda m, now: m.confirm())

    def room(self, timeout: float | None = 5.0) -> int:
        return self.call(lambda m, now: m.room()).result(timeout)

    def counters(self, timeout: float | None = 5.0) -> dict:
        return self.call(lambda m, now: dict(m.counters)).result(timeout)

    def get(self, timeout: float | None = None) -> Any:
        """The next event (machine events and PortChanged); queue.Empty after timeout."""
        return self.events.get(timeout=timeout)

    # ---- the driver thread ------------------------------------------------------------------
    def _on_data(self, data: bytes, now: float) -> None:
        self._inbox.put(("data", data, now))

    def _on_state(self, is_open: bool, reason: str) -> None:
        self._inbox.put(("state", is_open, reason))

    def _drive(self) -> None:
        m = self.machine
        while True:
            deadline = m.next_deadline()
            try:
                item = self._inbox.get(timeout=None if deadline is None
                                       else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                item = ()
            while item is not None:
                self._handle(item)
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
            if item is None:
                return
            now = time.monotonic()
            deadline = m.next_deadline()
            if deadline is not None and deadline <= now:
                m.handle_timeout(now)
            self._pump()

    def _handle(self, item: tuple) -> None:
        if not item:
            return
        m, kind = self.machine, item[0]
        if kind == "data":
            m.receive_data(item[1], item[2])
        elif kind == "state":
            self._emit(PortChanged(item[1], item[2]))
            if item[1] and self.autostart and not self._started:
                self._started = True
                m.start(time.monotonic())
        else:
            _, fn, fut = item
            try:
                fut.set_result(fn(m, time.monotonic()))
            except Exception as e:  # the caller sees it through the Future
                fut.set_exception(e)

    def _pump(self) -> None:
        """Hand the machine's events out, confirm, and write what it has to send."""
        m = self.machine
        while True:
            evs = m.events()
            for ev in evs:
                self._emit(ev)
            if self.auto_confirm and any(isinstance(ev, MessageReceived) for ev in evs):
                m.confirm()
            out = m.data_to_send()
            if out:
                self.port.write(out)
            if not evs and not out:
                return

    def _emit(self, event: Any) -> None:
        if self.on_event:
            try:
                self.on_event(event, time.monotonic())
            except Exception:
                log.exception("%s: on_event failed", self.port.url)
        else:
            self.events.put(event)


class Station:
    """What a daemon does around one line, in miniature, for tests and the bench: keeps a
    send queue and feeds the machine as room() allows, signs on again after LineDown (after
    `backoff` seconds) and re-queues `unacked` in front, drops duplicates across sign-ons by
    (origin, MSG_ID), and records what arrived. Everything runs on the Link's driver thread."""

    def __init__(self, machine: Any, port_url: str, *, backoff: float = 0.5, **link_kwargs: Any) -> None:
        self.link = Link(machine, port_url, on_event=self._on_event, **link_kwargs)
        self.backoff = backoff
        self.queue: collections.deque = collections.deque()  # not yet handed to the machine
        self.in_machine: collections.deque = collections.deque()  # handed over, not yet acked
        self.received: list[bytes] = []  # distinct images, in arrival order
        self.received_at: list[float] = []
        self.acked = self.duplicates = self.ups = 0
        self.downs: list[str] = []
        self.up = False
        self._seen: set = set()
        self._changed = threading.Condition()

    def __enter__(self) -> "Station":
        self.link.start()
        return self

    def __exit__(self, *exc) -> None:
        self.link.close()

    def send(self, images: list[bytes]) -> None:
        """Queue images (the daemon's SEND_LIST) from any thread."""
        def add(m: Any, now: float) -> None:
            self.queue.extend(images)
            self._feed(m)
        self.link.call(add)

    def wait(self, predicate: Callable[["Station"], bool], timeout: float) -> bool:
        """Wait until predicate(self) holds (checked after every event) or timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def _feed(self, m: Any) -> None:
        for _ in range(min(m.room(), len(self.queue))):
            image = self.queue.popleft()
            self.in_machine.append(image)
            m.send(image)

    def _signon(self, m: Any, now: float) -> None:
        if not self.up:
            m.start(now)

    def _on_event(self, ev: Any, now: float) -> None:
        m = self.link.machine
        if isinstance(ev, MessageReceived):
            key = key_of(ev.image)
            if key in self._seen:
                self.duplicates += 1
            else:
                self._seen.add(key)
                self.received.append(ev.image)
                self.received_at.append(now)
        elif isinstance(ev, MessageAcked):
            self.acked += 1
            if self.in_machine and self.in_machine[0] == ev.image:
                self.in_machine.popleft()
            elif ev.image in self.in_machine:
                log.error("%s: ack out of order", self.link.port.url)
                self.in_machine.remove(ev.image)
            self._feed(m)
        elif isinstance(ev, LineUp):
            self.up = True
            self.ups += 1
            self._feed(m)
        elif isinstance(ev, LineDown):
            self.up = False
            self.downs.append(ev.reason)
            self.queue.extendleft(reversed(ev.unacked))
            self.in_machine.clear()
            timer = threading.Timer(self.backoff, lambda: self.link.call(self._signon))
            timer.daemon = True
            timer.start()
        with self._changed:
            self._changed.notify_all()
