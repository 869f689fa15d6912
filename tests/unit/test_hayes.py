"""The Hayes modem's command phase (linedrivers.hayes) against the emulated modem
(mccs.testbed.hayes_modem), in memory with a simulated clock: dial, answer, chat, hang up, and
every result a call can end in."""
from __future__ import annotations

import pytest

from linedrivers.hayes import ChatStep, Connected, Dialer, Failed, HungUp, Phase, Result, Ringing
from mccs.testbed.hayes_modem import RING_EVERY, RINGS_MAX, HayesModem

pytestmark = pytest.mark.timeout(30)


class Pair:
    """Two dialers, each on its modem; the modems joined by a wire that carries at once."""

    def __init__(self, a: Dialer, b: Dialer):
        self.dialers = (a, b)
        self.modems = (HayesModem("5550101", 9600), HayesModem("5550102", 9600))
        self.modems[0].other, self.modems[1].other = self.modems[1], self.modems[0]
        self.now = 0.0
        self.events: tuple[list, list] = ([], [])
        self.data: tuple[list[bytes], list[bytes]] = ([], [])  # what reached each DTE as call data
        self.sent: tuple[list[bytes], list[bytes]] = ([], [])  # call data each DTE sends

    def run(self, seconds: float, step: float = 0.05) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = round(self.now + step, 6)
            for i, (dialer, modem) in enumerate(zip(self.dialers, self.modems)):
                modem.tick(self.now)
                dialer.handle_timeout(self.now)
                out = dialer.data_to_send()
                if dialer.phase is Phase.CONNECTED and self.sent[i]:
                    out += b"".join(self.sent[i])
                    self.sent[i].clear()
                wire = modem.from_dte(out, self.now) if out else b""
                if wire:
                    self._to_dte(1 - i, self.modems[1 - i].from_wire(wire))
                self._to_dte(i, modem.to_dte())

    def _to_dte(self, i: int, data: bytes) -> None:
        """Bytes for side i's port: its dialer's until the call is up (the chat's prompts too)."""
        dialer = self.dialers[i]
        if data and dialer.phase is not Phase.CONNECTED:
            data = dialer.receive_data(data, self.now)
        if data:
            self.data[i].append(data)
        self.events[i].extend(dialer.events())


def _kinds(events: list) -> list[type]:
    return [type(e) for e in events]


def test_a_call_is_dialled_answered_carries_data_and_is_hung_up():
    pair = Pair(Dialer(number="5550102"), Dialer())
    pair.dialers[1].start(0.0)  # the answering end: set up, waiting for RING
    pair.run(1.0)
    assert pair.dialers[1].phase is Phase.READY
    pair.dialers[0].dial(pair.now)
    pair.run(3.0)
    assert pair.dialers[0].phase is Phase.CONNECTED and pair.dialers[1].phase is Phase.CONNECTED
    caller, callee = (e for e in pair.events)
    assert Connected(9600, False) in caller and Connected(9600, True) in callee and Ringing in _kinds(callee)
    pair.sent[0].append(b"hello over the call")
    pair.run(0.5)
    assert b"".join(pair.data[1]) == b"hello over the call"
    pair.dialers[0].hang_up(pair.now)
    pair.run(4.0)  # guard, +++, guard, ATH0, OK
    assert pair.dialers[0].phase is Phase.IDLE and HungUp in _kinds(pair.events[0])
    assert pair.modems[1].state == "command"  # the far end's modem heard NO CARRIER


@pytest.mark.parametrize("fault, result", [("busy", Result.BUSY), ("no_answer", Result.NO_ANSWER),
                                           ("no_dialtone", Result.NO_DIALTONE)])
def test_a_call_that_fails_says_why(fault, result):
    pair = Pair(Dialer(number="5550102"), Dialer())
    pair.dialers[1].start(0.0)
    setattr(pair.modems[0 if fault == "no_dialtone" else 1].faults, fault, True)
    pair.dialers[0].dial(0.0)
    pair.run(RING_EVERY * (RINGS_MAX + 1))
    failed = [e for e in pair.events[0] if isinstance(e, Failed)]
    assert [f.result for f in failed] == [result] and pair.dialers[0].phase is Phase.IDLE


def test_a_wrong_number_and_a_modem_that_never_answers_end_the_call():
    pair = Pair(Dialer(number="5559999", connect_timeout=5.0), Dialer())
    pair.dialers[0].dial(0.0)
    pair.run(2.0)
    assert [e.result for e in pair.events[0] if isinstance(e, Failed)] == [Result.NO_ANSWER]
    silent = Dialer(command_timeout=2.0)
    silent.start(0.0)  # no modem on the port: ATZ is never answered
    silent.handle_timeout(2.0)
    assert [e.result for e in silent.events() if isinstance(e, Failed)] == [Result.TIMEOUT]


def test_the_chat_runs_after_connect_and_the_modem_can_answer_by_itself():
    pair = Pair(Dialer(number="5550102", chat=(ChatStep("login:", "mccs", 5.0),)),
                Dialer(init=("ATZ", "ATE0V1", "ATS0=1")))
    pair.dialers[1].start(0.0)
    pair.run(1.0)
    pair.dialers[0].dial(pair.now)
    pair.run(2.0)
    assert pair.dialers[0].phase is Phase.CHAT and pair.dialers[1].phase is Phase.CONNECTED  # S0=1
    pair.sent[1].append(b"\r\nlogin: ")  # a terminal server's prompt, from the far end
    pair.run(0.5)
    assert pair.dialers[0].phase is Phase.CONNECTED and b"mccs\r" in b"".join(pair.data[1])
    no_prompt = Pair(Dialer(number="5550102", chat=(ChatStep("login:", "mccs", 2.0),)),
                     Dialer(init=("ATZ", "ATS0=1")))
    no_prompt.dialers[1].start(0.0)
    no_prompt.run(1.0)
    no_prompt.dialers[0].dial(no_prompt.now)
    no_prompt.run(5.0)
    assert [e.result for e in no_prompt.events[0] if isinstance(e, Failed)] == [Result.TIMEOUT]


def test_the_carrier_lost_mid_call_is_no_carrier_at_both_ends():
    pair = Pair(Dialer(number="5550102"), Dialer())
    pair.modems[1].faults.drop_after = 2.0
    pair.dialers[1].start(0.0)
    pair.run(1.0)
    pair.dialers[0].dial(pair.now)
    pair.run(5.0)
    for i in (0, 1):  # in data mode the dialers pass NO CARRIER on as the call's data
        assert b"NO CARRIER" in b"".join(pair.data[i])
        assert pair.modems[i].state == "command"
