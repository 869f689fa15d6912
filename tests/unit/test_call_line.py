"""A line that is a call (linedrivers.call_line): two async machines behind emulated Hayes modems
(mccs.testbed.hayes_modem), in memory with a simulated clock and seeded randomness."""
from __future__ import annotations

import random

import pytest

from linedrivers import AsyncLine, LineDown, LineUp, MessageReceived
from linedrivers.call_line import CallLine, CallState, CallTraced
from linedrivers.hayes import Dialer
from linedrivers.image import encode
from mccs.testbed.hayes_modem import HayesModem
from mccs.testbed.hostsim import SimNet
from mccs.testbed.hostsim import line as line_config

pytestmark = pytest.mark.timeout(60)


class Calls:
    """AA and BB, each a CallLine on its modem, the modems joined by a wire that carries at once."""

    def __init__(self, seed: int = 1, always: bool = False, **keys):
        rng = random.Random(seed)
        self.modems = (HayesModem("5550101", 9600), HayesModem("5550102", 9600))
        self.modems[0].other, self.modems[1].other = self.modems[1], self.modems[0]
        self.lines = tuple(
            CallLine(AsyncLine(me, peer, reply_timeout=1.0, keepalive=5.0), Dialer(number=number), always=always,
                     answer=True, random_bytes=rng.randbytes, **keys)
            for me, peer, number in (("AA", "BB", "5550102"), ("BB", "AA", "5550101")))
        self.now = 0.0
        self.dcd: list[bool] | None = None  # the ports' DCD as told to the lines (with_modem_lines)
        self.sent = [b"", b""]  # every byte each line wrote to its modem
        self.events: tuple[list, list] = ([], [])
        for line in self.lines:
            line.start(0.0)

    def with_modem_lines(self, dcd_wired: bool = True) -> "Calls":
        """Both ports have DTR and DCD, as a real serial port has (a pty has neither); `dcd_wired`
        False: a cable without DCD (the port reads it off, always)."""
        self.dcd = [False, False] if dcd_wired else None
        for line in self.lines:
            line.modem_lines(True)
        return self

    def run(self, seconds: float, step: float = 0.02) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = round(self.now + step, 6)
            for i, (line, modem) in enumerate(zip(self.lines, self.modems)):
                modem.tick(self.now)
                if self.dcd is not None and self.dcd[i] != modem.dcd:
                    self.dcd[i] = modem.dcd
                    line.carrier(modem.dcd, self.now)
                deadline = line.next_deadline()
                if deadline is not None and deadline <= self.now:
                    line.handle_timeout(self.now)
                out, dtr = line.data_to_send(), line.dtr_change()
                self.sent[i] += out
                wire = modem.from_dte(out, self.now)
                if dtr is not None:
                    modem.set_dtr(dtr, self.now)
                if wire:
                    self._port(1 - i, self.modems[1 - i].from_wire(wire))
                self._port(i, modem.to_dte())

    def _port(self, i: int, data: bytes) -> None:
        line = self.lines[i]
        if data:
            line.receive_data(data, self.now)
        new = line.events()
        if any(isinstance(e, MessageReceived) for e in new):
            line.confirm()
        self.events[i].extend(new)

    def kinds(self, i: int, kind: type) -> list:
        return [e for e in self.events[i] if isinstance(e, kind)]


def _image(text: bytes) -> bytes:
    return encode("BBR", "AAS", 1, 0, text)


def test_a_call_on_demand_carries_a_message_and_is_hung_up_when_idle():
    calls = Calls(idle_hangup=5.0)
    calls.run(1.0)
    assert [line.state for line in calls.lines] == [CallState.IDLE, CallState.IDLE]
    calls.lines[0].call(calls.now)
    calls.run(2.0)
    assert calls.lines[0].connected and calls.lines[1].connected and calls.kinds(0, LineUp)
    calls.lines[0].send(_image(b"text with \r\nNO CARRIER\r\n in it"))  # (not the modem's: the call stays)
    calls.run(1.0)
    assert [e.image for e in calls.kinds(1, MessageReceived)] == [_image(b"text with \r\nNO CARRIER\r\n in it")]
    calls.run(4.0)
    assert calls.lines[0].connected  # the message was 4 s ago, and the NO CARRIER in it changed nothing
    calls.run(5.0)
    assert [line.state for line in calls.lines] == [CallState.IDLE, CallState.IDLE]
    hangups = [e for e in calls.kinds(0, CallTraced) if e.kind == "hangup"]
    assert len(hangups) == 1 and hangups[0].result.startswith("idle") and calls.kinds(0, LineDown)
    assert calls.modems[0].state == "command" and calls.modems[1].state == "command"


def test_both_ends_calling_at_once_end_in_one_call():
    calls = Calls(retry=2.0)
    calls.run(1.0)
    for line in calls.lines:
        line.call(calls.now)  # BB's ATD meets its modem ringing already: it fails, and BB answers instead
    calls.run(6.0)
    assert calls.lines[0].connected and calls.lines[1].connected
    answered = sum(line.call_counters["calls_answered"] for line in calls.lines)
    assert answered == 1 and calls.modems[0].counters["answered"] + calls.modems[1].counters["answered"] == 1


def test_a_lost_carrier_ends_the_call_and_a_line_always_up_calls_again():
    calls = Calls(always=True, retry=3.0, carrier_wait=2.0)
    calls.modems[1].faults.drop_after = 3.0
    calls.run(3.0)  # always: both call at start; BB's call fails on its ringing modem, and BB answers AA's
    assert calls.lines[0].connected
    calls.modems[1].faults.drop_after = None
    calls.run(15.0)  # the carrier goes 3 s into the call: NO CARRIER at both, the call ends, and is made again
    assert any(e.kind == "hangup" for e in calls.kinds(0, CallTraced))
    assert calls.lines[0].connected and calls.lines[1].connected
    assert len(calls.kinds(0, LineUp)) == 2


def test_the_retry_doubles_up_to_its_most():
    calls = Calls(retry=1.0, retry_max=4.0)
    calls.modems[1].faults.busy = True
    calls.lines[0].call(0.0)
    calls.run(40.0)
    tries = [e for e in calls.kinds(0, CallTraced) if e.kind == "dial"]
    assert 6 <= len(tries) <= 14 and calls.lines[0].retry_wait == 4.0  # 1, 2, 4, 4, ... each up to 1.5 times
    assert calls.lines[0].status(calls.now)["last_call"].startswith("BUSY")


def test_on_a_port_with_modem_lines_a_call_is_hung_up_by_dtr_and_its_loss_seen_by_dcd_at_once():
    calls = Calls(idle_hangup=5.0).with_modem_lines()
    calls.lines[0].call(calls.now)
    calls.run(2.0)
    assert calls.lines[0].connected and calls.lines[1].connected
    calls.run(6.0)  # idle: AA hangs up by dropping DTR for a second, no escape, no ATH0
    assert calls.modems[0].counters["dtr_hangups"] == 1 and calls.modems[0].state == "command"
    assert b"+++" not in calls.sent[0] and b"ATH" not in calls.sent[0]
    hangups = [e for e in calls.kinds(0, CallTraced) if e.kind == "hangup"]
    assert len(hangups) == 1 and hangups[0].result.startswith("idle")
    calls.run(3.0)
    assert calls.lines[0].dialer.dtr and calls.lines[0].state is CallState.IDLE  # DTR raised again, on hook
    assert [e.result for e in calls.kinds(1, CallTraced) if e.kind == "hangup"] == ["carrier lost (DCD)"]
    calls.lines[0].call(calls.now)
    calls.run(3.0)
    assert calls.lines[0].connected
    calls.modems[1].faults.drop_after = 0.0
    calls.modems[1]._timer = calls.now  # the carrier goes now
    calls.run(0.1)  # DCD: the call is over at once, not carrier_wait (2 s) after NO CARRIER
    assert calls.lines[0].state is not CallState.CONNECTED and calls.lines[1].state is not CallState.CONNECTED
    calls.run(3.0)  # (traced once on hook: DTR low for a second, then ATH0, the carrier having gone already)
    assert [e.result for e in calls.kinds(0, CallTraced) if e.kind == "hangup"][-1] == "carrier lost (DCD)"


def test_a_modem_that_ignores_dtr_on_a_cable_without_dcd_is_still_hung_up_by_the_escape():
    calls = Calls(idle_hangup=5.0).with_modem_lines(dcd_wired=False)
    for modem in calls.modems:
        modem.faults.ignore_dtr = True  # &D0
    calls.lines[0].call(calls.now)
    calls.run(2.0)
    assert calls.lines[0].connected
    calls.run(10.0)  # idle: DTR dropped for a second (ignored), then the escape and ATH0
    assert b"+++" in calls.sent[0] and b"ATH0" in calls.sent[0]
    assert calls.modems[0].state == "command" and calls.lines[0].state is CallState.IDLE


def test_a_call_hung_up_while_it_is_dialled_is_given_up_even_by_a_modem_that_ignores_dtr():
    calls = Calls(idle_hangup=5.0).with_modem_lines()
    for modem in calls.modems:
        modem.faults.ignore_dtr = True  # &D0: only the escape ends it
    calls.lines[0].call(calls.now)
    calls.run(2.0)
    assert calls.lines[0].connected  # DCD seen on: the port's DCD is wired
    calls.run(12.0)  # idle: hung up (by the escape), and on hook
    assert calls.lines[0].state is CallState.IDLE and calls.modems[0].state == "command"
    ups = len(calls.kinds(0, LineUp))
    calls.lines[0].answer = False  # (an answering end sets its modem up again at once, which stops a dial)
    calls.lines[0].call(calls.now)
    calls.run(0.1)
    assert calls.lines[0].state is CallState.DIALLING and calls.modems[0].state != "online"
    calls.lines[0].hang_up(calls.now)  # DCD was off when the hang-up began: DTR alone proves nothing
    calls.run(6.0)
    assert calls.modems[0].state == "command" and calls.modems[1].state == "command"
    assert calls.lines[0].state is CallState.IDLE and len(calls.kinds(0, LineUp)) == ups


def test_two_hosts_whose_ports_have_modem_lines_hang_up_by_dtr_through_the_daemon_s_own_driver(tmp_path):
    """The core and its driver (mccs.testbed.hostsim runs mccs.daemon.driver) with the defaults: a demand
    line carries a message, then hangs up after idle_hangup (60 s) by dropping DTR for a second."""
    net = SimNet(tmp_path, {"AA": [line_config("BB", call="demand", dial="50002")],
                            "BB": [line_config("AA", answer=True)]}, modems=True, modem_lines=True)
    net.client("AA", "S").send("BBR", b"over a real serial port")
    r = net.client("BB", "R")
    assert net.run(lambda: r.recv(wait=False)["msg"], duration=30)
    assert net.run(lambda: net["AA"].kernel.lines["BB"].machine.state == "idle", duration=70)
    dtr = [w.dtr for fx in net["AA"].passes for w in fx.writes if w.dtr is not None]
    assert dtr == [False, True]  # dropped, raised a second later
    assert all(b"+++" not in w.data for fx in net["AA"].passes for w in fx.writes)
    hangups = [ev.fields for ev in net["AA"].traces if ev.type == "call" and ev.kind == "hangup"]
    assert len(hangups) == 1 and hangups[0]["result"].startswith("idle for 60")
    assert net["BB"].kernel.lines["AA"].machine.last_result == "hung up: carrier lost (DCD)"
