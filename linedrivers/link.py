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

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from .events import MessageReceived
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
    """

    def __init__(self, machine: Any, port_url: str, *, auto_confirm: bool = True,
                 autostart: bool = True, **port_kwargs: Any) -> None:
        self.machine = machine
        self.auto_confirm, self.autostart = auto_confirm, autostart
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
            self.events.put(PortChanged(item[1], item[2]))
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
                self.events.put(ev)
            if self.auto_confirm and any(isinstance(ev, MessageReceived) for ev in evs):
                m.confirm()
            out = m.data_to_send()
            if out:
                self.port.write(out)
            if not evs and not out:
                return
