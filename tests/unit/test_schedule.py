"""A line that calls on a schedule (mccs.core.schedule, docs/CALLS.md): its windows, and two hosts
in the in-memory simulator with emulated modems over simulated days."""
from __future__ import annotations

import time
from datetime import datetime

import pytest

from mccs.config import ConfigError
from mccs.core.schedule import Schedule, ScheduleError, parse
from mccs.testbed.hostsim import WALL0, SimNet, line

pytestmark = pytest.mark.timeout(120)
HOUR = 3600.0


@pytest.mark.parametrize("text, days, start, end", [("Mo-Fr 22:00-06:00", {0, 1, 2, 3, 4}, 1320, 360),
                                                    ("Sa-Su", {5, 6}, 0, 1440),
                                                    ("12:00-13:00", set(range(7)), 720, 780),
                                                    ("Fr-Mo 8:00-9:30", {4, 5, 6, 0}, 480, 570),
                                                    ("mo,we", {0, 2}, 0, 1440)])
def test_windows_are_read(text, days, start, end):
    w = parse(text)
    assert (set(w.days), w.start, w.end) == (days, start, end)


@pytest.mark.parametrize("text", ["", "Xx", "Mo 25:00-26:00", "Mo 10:00", "10:00-10:00", "Mo-Fr 22:00-06:00 x"])
def test_a_window_that_cannot_be_read_is_a_clear_error(text):
    with pytest.raises(ScheduleError, match="schedule window"):
        parse(text)


def test_a_window_past_midnight_belongs_to_the_day_it_began():
    nights = Schedule.of(["Mo-Fr 22:00-06:00"])
    assert nights.open(datetime(2027, 1, 19, 3, 0))  # Tuesday 03:00: Monday's night
    assert nights.open(datetime(2027, 1, 23, 5, 59))  # Saturday 05:59: Friday's
    assert not nights.open(datetime(2027, 1, 24, 3, 0))  # Sunday 03:00: Saturday has none
    assert not nights.open(datetime(2027, 1, 18, 5, 0))  # Monday 05:00: Sunday has none
    assert nights.next_open(datetime(2027, 1, 23, 12, 0)) == datetime(2027, 1, 25, 22, 0)  # Saturday -> Monday


def test_the_config_says_what_is_wrong_with_a_schedule():
    with pytest.raises(ConfigError, match="needs schedule"):
        line("BB", call="schedule", dial="5").check()
    with pytest.raises(ConfigError, match="is not a day"):
        line("BB", call="schedule", dial="5", schedule=["Mo-Fx"]).check()
    with pytest.raises(ConfigError, match='for call = "schedule"'):
        line("BB", call="demand", dial="5", schedule=["Sa-Su"]).check()


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC: the simulator's wall clock starts on Friday 15 January 2027, 08:00."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    assert datetime.fromtimestamp(WALL0) == datetime(2027, 1, 15, 8, 0)
    yield
    monkeypatch.undo()
    time.tzset()


def _dials(net: SimNet) -> list[float]:
    """Hours after 08:00 on the first day at which AA dialled."""
    return [(ev.at - WALL0) / HOUR for ev in net["AA"].traces if ev.type == "call" and ev.kind == "dial"]


@pytest.mark.parametrize("mode", ["demand", "connected"])
def test_a_scheduled_line_calls_only_in_its_window_over_simulated_days_but_for_an_urgent_message(tmp_path, utc,
                                                                                                 mode):
    net = SimNet(tmp_path, {"AA": [line("BB", call="schedule", schedule=["12:00-13:00"], schedule_mode=mode,
                                        dial="50002", answer=True)],
                            "BB": [line("AA", call="demand", answer=True)]}, modems=True, max_step=30.0)
    assert net.number("BB", "AA") == "50002"
    s, r = net.client("AA", "S"), net.client("BB", "R")
    bb = net["BB"].kernel
    s.send("BBR", b"at noon")  # 08:00
    net.run(duration=3.9 * HOUR)
    assert not _dials(net) and len(bb.lists.recv) == 0  # nothing before the window
    assert net.run(lambda: len(bb.lists.recv) == 1, duration=0.2 * HOUR)
    assert r.recv()["msg"]["data"] == "YXQgbm9vbg=="
    net.run(duration=0.5 * HOUR)  # 12:30: "connected" keeps the call up all the window, idle or not
    assert net["AA"].kernel.lines["BB"].machine.connected == (mode == "connected")
    net.run(duration=1.0 * HOUR)  # 13:30: the window is closed, the call hung up
    assert net["AA"].kernel.lines["BB"].machine.state == "idle"
    s.send("BBR", b"tomorrow")
    assert not net.run(lambda: len(bb.lists.recv), duration=22.4 * HOUR)  # till 11:54 the next day
    assert net.run(lambda: len(bb.lists.recv) == 1, duration=0.2 * HOUR)
    r.recv()
    net.run(duration=2 * HOUR)  # 14:00 the next day
    urgent_at = net.now
    s.send("BBR", b"now", priority=7)
    assert net.run(lambda: len(bb.lists.recv) == 1, duration=0.2 * HOUR)  # urgent: at once
    dials = _dials(net)
    if mode == "demand":
        assert len(dials) == 3  # noon, noon the next day, and the urgent one at 14:00
    assert all(4.0 <= d < 5.0 or 28.0 <= d < 29.0 for d in dials[:-1]), dials
    assert urgent_at / HOUR <= dials[-1] < urgent_at / HOUR + 0.05
    status = net["AA"].kernel.lines["BB"].status(net.now)
    assert status["window"].startswith("closed until Sun 12:00"), status
