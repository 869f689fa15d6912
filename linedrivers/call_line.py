"""A line that is a call: a protocol machine (AsyncLine, BscLine) behind a Hayes modem, as one
sans-I/O machine with the same interface, so the daemon drives it as it drives a leased line.

Between calls the port talks to the modem (linedrivers.hayes): its bytes go to the Dialer, and
the protocol machine is DOWN. A call is placed on `call()` (the owner has messages for the peer,
or an operator asked) or, for a line that is always up, on `start()`; an incoming RING is answered
when `answer` is set. Once connected the protocol signs on over the call; when it goes DOWN, or
when nothing was carried for `idle_hangup` seconds, the call is hung up. A failed call is tried
again after `retry` seconds, doubling up to `retry_max`, with a random part so that two ends that
call each other at once (each finds the other BUSY) do not meet again.

A call that ends after the protocol signed on is made again as soon as messages wait; one that
ended before is a failed call. The call's end is noticed three ways: the protocol's silence rule
(the peer's frames stop); a NO CARRIER line from the modem after which no good frame comes for
`carrier_wait` seconds (a message's own text may say NO CARRIER); and, on a port with modem
lines, DCD going low (`carrier()`), at once. On such a port the call is hung up by dropping DTR
(linedrivers.hayes); the owner says whether the port has them (`modem_lines()`) and sets DTR as
`dtr_change()` says.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .events import Event, FrameTraced, LineDown, LineUp, MessageAcked, MessageReceived
from .hayes import Connected, Dialer, Failed, HungUp, Phase, Ringing

NO_CARRIER = b"\r\nNO CARRIER\r\n"
NO_CARRIER_WHY, DCD_WHY = "NO CARRIER", "carrier lost (DCD)"


class CallState(StrEnum):
    IDLE = "idle"  # on hook; no call wanted
    DIALLING = "dialling"  # the modem is being set up, dials or answers
    CONNECTED = "connected"
    HANGING_UP = "hanging up"
    WAITING = "waiting"  # a call failed: the next try is at `retry_at`


@dataclass
class CallTraced:
    """For the trace and the log: a call's step (dial, result, connect, hangup)."""
    kind: str  # "dial", "answer", "result", "connect", "hangup"
    result: str = ""  # CONNECT, BUSY, ... (result); why (hangup)
    duration: float | None = None  # seconds connected (hangup)
    bytes: int | None = None  # bytes both ways while connected (hangup)


class CallLine:
    """See the module docstring. `inner`: the protocol machine; `dialer`: the modem; `always`: keep
    a call up (else call only when asked); `answer`: answer incoming calls."""

    def __init__(self, inner: Any, dialer: Dialer, *, always: bool, answer: bool, idle_hangup: float = 60.0,
                 retry: float = 30.0, retry_max: float = 3600.0, carrier_wait: float = 2.0,
                 random_bytes: Callable[[int], bytes] | None = None):
        self.inner, self.dialer = inner, dialer
        self.always, self.answer, self.idle_hangup = always, answer, idle_hangup
        self.retry_min, self.retry_max, self.carrier_wait = retry, retry_max, carrier_wait
        self.random_bytes = random_bytes or secrets.token_bytes  # the retry's random part
        self.state = CallState.IDLE
        self.retry_wait = retry
        self.retry_at: float | None = None
        self.wanted = False  # a call is wanted (it waits for retry_at)
        self.since = 0.0  # when the state began
        self.last_result = ""
        self.last_activity = 0.0  # a message handed, received or acknowledged while connected
        self.unacked = 0
        self.call_bytes = 0
        self.carrier_gone_at: float | None = None
        self._hangup: CallTraced | None = None  # the call being hung up, for its event once on hook
        self.inner_up = False  # the protocol is signed on over the call
        self.keep_up = False  # the owner wants the call kept up for now, idle or not (a schedule's window)
        self.signed_on = False  # ... and was, in this call: once it ends, the next may be made at once
        self.call_counters = dict.fromkeys(("calls", "calls_answered", "calls_failed", "hangups", "modem_bytes"), 0)
        self._events: list[Event | CallTraced] = []
        self._now = 0.0

    # -- what the daemon reads of a machine ---------------------------------------------------------
    @property
    def counters(self) -> dict:
        return {**self.inner.counters, **self.call_counters}

    @property
    def epoch(self) -> str:
        return self.inner.epoch

    @epoch.setter
    def epoch(self, value: str) -> None:
        self.inner.epoch = value

    @property
    def connected(self) -> bool:
        return self.state is CallState.CONNECTED

    def status(self, now: float) -> dict:
        out: dict = {"call": str(self.state), "call_since": round(now - self.since, 1)}
        if self.state is CallState.WAITING and self.retry_at is not None:
            out["next_try_in"] = round(max(0.0, self.retry_at - now), 1)
        if self.last_result:
            out["last_call"] = self.last_result
        return out

    # -- the call -----------------------------------------------------------------------------------
    def call(self, now: float, force: bool = False) -> None:
        """Messages wait for the peer: call, unless a call is up or being made, or the last one
        failed and its retry time has not come (then at that time); `force` (an operator): now."""
        self._now = now
        self.wanted = True
        if self.state is CallState.IDLE or (self.state is CallState.WAITING and (
                force or self.retry_at is not None and now >= self.retry_at)):
            self._dial(now)

    def hang_up(self, now: float, why: str = "asked") -> None:
        """End the call (an operator, or the daemon stopping): the protocol signs off first."""
        self._now = now
        self.wanted = False
        if self.state is CallState.CONNECTED:
            self._end(now, why)
        elif self.state is CallState.DIALLING:
            self.dialer.hang_up(now)
            self._set(CallState.HANGING_UP, now)
        elif self.state is CallState.WAITING:
            self.retry_at = None
            self._set(CallState.IDLE, now)

    def _dial(self, now: float) -> None:
        if not self.dialer.number:
            return  # an answering end only: it waits for the peer to call
        self.call_counters["calls"] += 1
        self._set(CallState.DIALLING, now)
        self._events.append(CallTraced("dial"))
        self.dialer.dial(now)

    def _set(self, state: CallState, now: float) -> None:
        self.state, self.since = state, now

    def _end(self, now: float, why: str) -> None:
        """Connected: the protocol signs off (its O frame goes first), then the modem hangs up."""
        self.inner.stop(now)  # (nothing if it is down already)
        self.call_counters["hangups"] += 1
        self._hangup = CallTraced("hangup", why, round(now - self.since, 3), self.call_bytes)  # told once on hook
        self.last_result = f"hung up: {why}"
        self.dialer.hang_up(now, escape=why not in (NO_CARRIER_WHY, DCD_WHY))  # (the modem is in command mode)
        self._set(CallState.HANGING_UP, now)

    # -- the port's modem lines ---------------------------------------------------------------------
    def modem_lines(self, present: bool) -> None:
        """The port has DTR and DCD (a real serial port; a pty has neither)."""
        self.dialer.has_dtr = present

    def carrier(self, on: bool, now: float) -> None:
        """DCD changed: low in a call is the call's end (the modem is back in command mode)."""
        self._now = now
        self.dialer.carrier(on)
        if not on and self.state is CallState.CONNECTED:
            self._end(now, DCD_WHY)

    def dtr_change(self) -> bool | None:
        return self.dialer.dtr_change()

    # -- the machine's interface ----------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Sign on: over the call when connected; else set the modem up (and call, if always)."""
        self._now = now
        if self.state is CallState.CONNECTED:
            self.inner.start(now)
        elif self.state is CallState.IDLE:
            if self.dialer.phase is Phase.IDLE and (self.answer or self.always):
                self.dialer.start(now)
            if self.always:
                self.call(now)

    def stop(self, now: float) -> None:
        self.hang_up(now, "stopped")

    def send(self, image: bytes, priority: int = 0) -> None:
        self.inner.send(image, priority)
        self.unacked += 1
        self.last_activity = self._now

    def receive_data(self, data: bytes, now: float) -> None:
        self._now = now
        if self.state is CallState.CONNECTED:
            self.call_bytes += len(data)
            if NO_CARRIER in data:
                self.carrier_gone_at = self.carrier_gone_at or now
            self.inner.receive_data(data, now)
            return
        rest = self.dialer.receive_data(data, now)
        self.call_counters["modem_bytes"] += len(data) - len(rest)
        self._dialer_events(now)
        if rest and self.state is CallState.CONNECTED:
            self.receive_data(rest, now)

    def data_to_send(self, now: float | None = None) -> bytes:
        out = self.inner.data_to_send(now) if self.state in (CallState.CONNECTED, CallState.HANGING_UP) else b""
        if self.state is CallState.CONNECTED:
            self.call_bytes += len(out)
        command = self.dialer.data_to_send()
        self.call_counters["modem_bytes"] += len(command)
        return out + command

    def events(self) -> list:
        for ev in self.inner.events():
            if isinstance(ev, (MessageReceived, MessageAcked)):
                self.last_activity = self._now
                self.unacked -= isinstance(ev, MessageAcked)
            elif isinstance(ev, FrameTraced) and ev.dir == "rx" and ev.ok:
                self.carrier_gone_at = None  # a good frame: the call is there
            elif isinstance(ev, LineUp):
                self.last_activity, self.inner_up, self.signed_on = self._now, True, True
            elif isinstance(ev, LineDown):
                self.unacked, self.inner_up = 0, False
                if self.state is CallState.CONNECTED:
                    self._end(self._now, f"the line went down: {ev.reason}")
            self._events.append(ev)
        events, self._events = self._events, []
        return events

    def next_deadline(self) -> float | None:
        times = [self.dialer.next_deadline()]
        if self.state is CallState.CONNECTED:
            times.append(self.inner.next_deadline())
            if self.carrier_gone_at is not None:
                times.append(self.carrier_gone_at + self.carrier_wait)
            if self._idle_possible():
                times.append(self.last_activity + self.idle_hangup)
        elif self.state is CallState.WAITING and self.retry_at is not None and (self.wanted or self.always):
            times.append(self.retry_at)
        return min((t for t in times if t is not None), default=None)

    def handle_timeout(self, now: float) -> None:
        self._now = now
        self.dialer.handle_timeout(now)
        self._dialer_events(now)
        if self.state is CallState.CONNECTED:
            if self.carrier_gone_at is not None and now >= self.carrier_gone_at + self.carrier_wait:
                self._end(now, NO_CARRIER_WHY)
            elif self._idle_possible() and now >= self.last_activity + self.idle_hangup:
                self._end(now, f"idle for {self.idle_hangup:g} s")
            else:
                self.inner.handle_timeout(now)
        elif self.state is CallState.WAITING and self.retry_at is not None and now >= self.retry_at:
            if self.wanted or self.always:
                self._dial(now)

    def _idle_possible(self) -> bool:
        """Hang up for want of traffic: not a line always up, and nothing waits for an answer."""
        return not (self.always or self.keep_up) and self.unacked <= 0 and self.inner_up

    def _dialer_events(self, now: float) -> None:
        for ev in self.dialer.events():
            if isinstance(ev, Ringing):
                if self.state is CallState.IDLE or self.state is CallState.WAITING:
                    self.call_counters["calls_answered"] += 1
                    self._set(CallState.DIALLING, now)
                    self._events.append(CallTraced("answer"))
            elif isinstance(ev, Connected):
                self._connected(ev, now)
            elif isinstance(ev, Failed):
                self._failed(ev, now)
            elif isinstance(ev, HungUp):  # (the event makes the owner look again at what waits: a call)
                self._events.append(self._hangup or CallTraced("hangup", ev.detail))
                self._hangup = None
                self._set(CallState.IDLE, now)
                if self.answer or self.always:
                    self.dialer.start(now)  # set up again, for the next RING
                if (self.wanted or self.always) and not self.signed_on:
                    self._wait(now)  # a call in which the protocol never signed on counts as failed
                elif self.always:
                    self._dial(now)
                self.signed_on = False

    def _connected(self, ev: Connected, now: float) -> None:
        self._set(CallState.CONNECTED, now)
        self.retry_wait, self.retry_at, self.wanted = self.retry_min, None, False
        self.last_activity, self.call_bytes, self.carrier_gone_at = now, 0, None
        self.last_result = f"CONNECT {ev.baud}" if ev.baud else "CONNECT"
        self._events.append(CallTraced("connect", self.last_result))
        self.inner.start(now)

    def _failed(self, ev: Failed, now: float) -> None:
        self.call_counters["calls_failed"] += 1
        self.last_result = str(ev.result) + (f" ({ev.detail})" if ev.detail else "")
        self._events.append(CallTraced("result", str(ev.result)))
        self._events.append(LineDown(f"call failed: {ev.result}"))
        self._wait(now)
        if self.answer or self.always:
            self.dialer.start(now)

    def _wait(self, now: float) -> None:
        """The next try after the retry time, with up to half as much again at random."""
        jitter = int.from_bytes(self.random_bytes(2), "big") / 65536 * 0.5
        self.retry_at = now + self.retry_wait * (1 + jitter)
        self.retry_wait = min(self.retry_wait * 2, self.retry_max)
        self._set(CallState.WAITING, now)

    # -- delegated as they are ------------------------------------------------------------------------
    def bytes_wanted(self) -> int:
        return self.inner.bytes_wanted() if self.state is CallState.CONNECTED else 1

    def unconfirmed_room(self) -> int:
        return self.inner.unconfirmed_room()

    def confirm(self) -> None:
        self.inner.confirm()

    def set_busy(self, flag: bool) -> None:
        self.inner.set_busy(flag)

    def room(self) -> int:
        return self.inner.room() if self.state is CallState.CONNECTED else 0

    @property
    def receiving(self) -> bool:
        return self.state is CallState.CONNECTED and self.inner.receiving

    def next_write(self) -> float | None:
        return self.inner.next_write() if self.state in (CallState.CONNECTED, CallState.HANGING_UP) else None

    def paced(self, now: float) -> bytes:
        out = self.inner.paced(now) if self.state in (CallState.CONNECTED, CallState.HANGING_UP) else b""
        if self.state is CallState.CONNECTED:
            self.call_bytes += len(out)
        return out

    def segment_size(self) -> int:
        return self.inner.segment_size()
