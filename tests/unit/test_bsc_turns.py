"""Custody's own messages on a half-duplex line (mccs.core.lines, LOOSE_BYTES): a destination's state
waits for the sender to give a BSC line up instead of asking for it (RVI), which turns the line
round twice, but no longer than the line takes to carry LOOSE_BYTES. In memory: the daemon's core
and BSC machines on a simulated line paced at 9600 baud, every other default as the simulator has it."""
from __future__ import annotations

import base64

import pytest

from mccs.core import custody
from mccs.core.lines import LOOSE_BYTES
from mccs.testbed.hostsim import WALL0, SimNet, line

BAUD = 9600


def _bsc_pair(tmp_path) -> SimNet:
    net = SimNet(tmp_path, {"AA": [line("BB", protocol="bsc", baud=BAUD)],
                            "BB": [line("AA", protocol="bsc", role="secondary", baud=BAUD)]})
    for side in "ab":
        net.channel("AA", "BB").towards(side).imp.baud = BAUD
    src, dst = net.client("AA", "S"), net.client("BB", "R")
    src.send("BBR", b"first")  # the destination's first state begins custody
    assert dst.recv(timeout=30)["msg"] is not None
    assert net.run(lambda: ("BB", 0) in net["AA"].kernel.pairs.out.kept, duration=60)
    return net


def _burst(net: SimNet, n: int) -> tuple[float, float]:
    """AA sends `n` messages of 128 bytes at once and BB's process takes them as they come:
    (the simulated time the first was taken, the time the last was)."""
    src, dst = net.client("AA", "S"), net.client("BB", "R")
    for i in range(n):
        src.send("BBR", b"%05d" % i + bytes(123))
    times, got = [], []
    for _ in range(n):
        msg = dst.recv(timeout=30)["msg"]
        assert msg is not None
        got.append(base64.b64decode(msg["data"])[:5])
        times.append(net.now)
    assert got == [b"%05d" % i for i in range(n)]  # each once, in order
    return times[0], times[-1]


def _sent(net: SimNet, kind: str) -> list[float]:
    """When BB sent `kind` (RVI: asked for the line) or stored a custody state (simulated seconds)."""
    return [t.at - WALL0 for t in net["BB"].traces
            if (t.type, t.kind, t.fields.get("dir"), t.fields.get("notice")) in
            (("frame", kind, "tx", None), ("msg", "accepted", None, kind))]


def _copies(net: SimNet) -> int:
    return len(net["AA"].kernel.custody.copies.get(("BB", 0), {}))


WAIT = LOOSE_BYTES * 10 / BAUD  # 10.4 s


@pytest.mark.timeout(120)
def test_a_state_made_while_the_sender_holds_the_line_goes_when_it_gives_the_line_up(tmp_path):
    net = _bsc_pair(tmp_path)
    first, last = _burst(net, 45)  # about 9 s of blocks; the first taken makes a state (custody begins)
    states = [t for t in _sent(net, "state") if t >= first]
    assert states and states[0] < last < states[0] + WAIT  # made while AA held the line, which it gave up
    assert net.run(lambda: _copies(net) == 0, duration=60)  # then the state came: AA dropped its copies
    assert _sent(net, "RVI") == [] and net["BB"].kernel.lines["AA"].machine.counters["rvis"] == 0


@pytest.mark.timeout(120)
def test_a_state_asks_for_the_line_once_it_has_waited_as_long_as_loose_bytes_take(tmp_path):
    net = _bsc_pair(tmp_path)
    first, last = _burst(net, 160)  # about 30 s of blocks
    rvis, states = _sent(net, "RVI"), [t for t in _sent(net, "state") if t >= first]
    assert rvis and states[0] + WAIT - 0.1 <= rvis[0] < last, (states, rvis)  # not sooner; and not starved
    assert len(rvis) <= (last - first) / (custody.STATE_WAIT + WAIT) + 1  # (at once: one every STATE_WAIT)
    assert net.run(lambda: _copies(net) == 0, duration=60)
