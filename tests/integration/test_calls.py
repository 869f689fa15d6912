"""Lines that are calls (docs/CALLS.md): two real daemons over emulated Hayes modems on a virtual
line (mccs.testbed.hayes_modem), each end able to call the other and to answer."""
from __future__ import annotations

import random
import time
from datetime import datetime, timedelta

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(180)

BAUD = 19200


def _line(vl: Lines, host: str, peer: str, baud: int = BAUD, **keys) -> dict:
    """host's line to peer: it dials peer's modem when messages wait, and answers peer's calls."""
    return {"peer": peer, "port": vl.port(host, peer), "protocol": "async", "baud": baud, **timers(baud),
            "call": "demand", "dial": vl.number(peer, host), "answer": True, **keys}


def _call(d: DaemonProcess, peer: str) -> dict:
    with mccs.connect(d.config, "Q") as q:
        return next(line for line in q.status()["lines"] if line["peer"] == peer)


def _both_ways(there: DaemonProcess, back: DaemonProcess, to: str, sender: str, text: bytes, answer: bytes,
               seconds: float = 30) -> None:
    """`there`'s process S sends `text` to `to` (at `back`), whose R answers `answer` to `sender`."""
    with mccs.connect(there.config, "S") as s, mccs.connect(back.config, "R") as r:
        s.send(to, text)
        got = r.recv(timeout=seconds)
        assert got is not None and got.data == text
        r.send(sender, answer)
        returned = s.recv(timeout=seconds)
        assert returned is not None and returned.data == answer


def _until(check, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, what
        time.sleep(0.2)


@pytest.fixture
def pair(tmp_path, request):
    keys = getattr(request, "param", {})
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=BAUD, modems=True) as vl:
        d = {h: DaemonProcess(write_config(tmp_path, h, [_line(vl, h, p, **keys)]))
             for h, p in (("AA", "BB"), ("BB", "AA"))}
        for daemon in d.values():
            daemon.start()
        try:
            yield vl, d
        finally:
            for daemon in d.values():
                daemon.stop()


@pytest.mark.parametrize("pair", [{"idle_hangup": 4}], indirect=True)
def test_a_demand_line_calls_carries_both_ways_and_hangs_up_when_idle(pair):
    vl, d = pair
    time.sleep(1.0)
    assert _call(d["AA"], "BB")["call"] == "idle" and vl.lines["AA-BB"].modems[0].counters["calls"] == 0
    _both_ways(d["AA"], d["BB"], "BBR", "AAS", b"over the first call", b"and back on it")
    modems = vl.lines["AA-BB"].modems
    assert modems[0].counters["calls"] == 1 and modems[1].counters["calls"] == 0  # one call, AA's, both ways
    _until(lambda: _call(d["AA"], "BB")["call"] == "idle" and _call(d["BB"], "AA")["call"] == "idle", 30,
           "the call was not hung up when idle")
    ends = [_call(d["AA"], "BB"), _call(d["BB"], "AA")]  # the first whose idle time ran out hung up, the other
    assert any(e["last_call"].startswith("hung up: idle") for e in ends), ends  # followed its sign-off
    assert [e["counters"]["hangups"] for e in ends] == [1, 1]
    assert modems[0].state == "command" and modems[1].state == "command"
    with mccs.connect(d["BB"].config, "R") as r, mccs.connect(d["AA"].config, "S") as s:
        r.send("AAS", b"BB calls this time")
        got = s.recv(timeout=30)
        assert got is not None and got.data == b"BB calls this time"
    assert modems[1].counters["calls"] == 1
    _until(lambda: _call(d["AA"], "BB")["call"] == "idle", 30, "BB's call was not hung up when idle")
    made = mccs_cli("line", "call", "-c", str(d["AA"].config), "BB", timeout=30)  # the operator calls
    assert made.returncode == 0 and made.stdout.startswith("line to BB: dialling"), made
    _until(lambda: _call(d["AA"], "BB")["call"] == "connected", 20, "the operator's call was not made")
    hangups = _call(d["AA"], "BB")["counters"]["hangups"]
    _both_ways(d["AA"], d["BB"], "BBR", "AAS", b"on the operator's call", b"and back")  # idle_hangup from now
    ended = mccs_cli("line", "hangup", "-c", str(d["AA"].config), "BB", timeout=30)
    assert ended.returncode == 0 and "hanging up, last call: hung up: the operator hung up" in ended.stdout, ended
    # (the call ends; a daemon message that waits, a custody state say, may make the next one at once)
    assert _call(d["AA"], "BB")["counters"]["hangups"] == hangups + 1
    wrong = mccs_cli("line", "call", "-c", str(d["AA"].config), "CC", timeout=30)
    assert wrong.returncode == 2 and "no line to CC" in wrong.stderr, wrong


@pytest.mark.parametrize("pair", [{"idle_hangup": 4, "call_retry": 3}], indirect=True)
def test_a_busy_callee_makes_the_caller_try_again_later(pair):
    vl, d = pair
    modems = vl.lines["AA-BB"].modems
    modems[1].faults.busy = True
    with mccs.connect(d["AA"].config, "S") as s:
        s.send("BBR", b"waits for a free line")
    _until(lambda: _call(d["AA"], "BB").get("last_call", "").startswith("BUSY"), 30, "no BUSY")
    line = _call(d["AA"], "BB")
    assert line["call"] == "waiting" and line["next_try_in"] > 0 and line["counters"]["calls_failed"] >= 1
    modems[1].faults.busy = False
    with mccs.connect(d["BB"].config, "R") as r:
        got = r.recv(timeout=60)  # the next try (3 s, then 6 s, and a random part) gets through
        assert got is not None and got.data == b"waits for a free line"
    assert _call(d["AA"], "BB")["counters"]["calls_failed"] >= 1


def test_a_host_on_a_leased_line_reaches_a_host_beyond_a_demand_line(tmp_path):
    """CC -(leased)- AA -(demand call)- BB: CC's message for BB makes AA call BB, and BB's answer
    comes back on that call; the route through the idle call line is there from the start."""
    leased = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
    with Lines(str(tmp_path / "dev"), ["CC-AA"], baud=BAUD) as vl, \
            Lines(str(tmp_path / "tel"), ["AA-BB"], baud=BAUD, modems=True) as tel:
        d = {"CC": DaemonProcess(write_config(tmp_path, "CC", [{"peer": "AA", "port": vl.port("CC", "AA"), **leased}])),
             "AA": DaemonProcess(write_config(tmp_path, "AA", [{"peer": "CC", "port": vl.port("AA", "CC"), **leased},
                                                               _line(tel, "AA", "BB")])),
             "BB": DaemonProcess(write_config(tmp_path, "BB", [_line(tel, "BB", "AA")]))}
        for daemon in d.values():
            daemon.start()
        try:
            def cc_knows_bb() -> bool:
                with mccs.connect(d["CC"].config, "Q") as q:
                    return any(r["to"] == "BB" and r["via"] == "AA" and r["distance"] for r in q.status()["routes"])
            _until(cc_knows_bb, 30, "CC never learned a route to BB through AA")
            assert tel.lines["AA-BB"].modems[0].counters["calls"] == 0  # learned without a call
            _both_ways(d["CC"], d["BB"], "BBR", "CCS", b"two lines, one of them a call", b"back the same way", 60)
            assert _call(d["AA"], "BB")["counters"]["calls"] >= 1
        finally:
            for daemon in d.values():
                daemon.stop()


@pytest.mark.parametrize("size, drop", [pytest.param(512 << 10, 1.0, id="512KiB"),
                                        pytest.param(4 << 20, 8.0, id="4MiB", marks=pytest.mark.slow)])
def test_a_large_message_goes_on_across_calls_whose_carrier_is_lost(tmp_path, size, drop):
    """Every call loses its carrier `drop` seconds in: the message goes on where the last call left
    it, on the next call the waiting message makes, and arrives once, byte for byte."""
    baud = 2_000_000  # paced: 200,000 bytes/s
    data = random.Random(5).randbytes(size)
    with Lines(str(tmp_path / "tel"), ["AA-BB"], baud=baud, modems=True) as tel:
        tel.lines["AA-BB"].modems[1].faults.drop_after = drop
        d = {h: DaemonProcess(write_config(tmp_path, h, [_line(tel, h, p, baud=baud)], max_message=16 << 20))
             for h, p in (("AA", "BB"), ("BB", "AA"))}
        for daemon in d.values():
            daemon.start()
        try:
            with mccs.connect(d["AA"].config, "S") as s, mccs.connect(d["BB"].config, "R") as r:
                s.send("BBR", data)
                got = r.recv(timeout=240)
                assert got is not None and got.data == data
                assert r.recv(timeout=2) is None  # once
            calls = _call(d["AA"], "BB")["counters"]
            assert calls["calls"] >= 2 and tel.lines["AA-BB"].modems[1].counters["carrier_lost"] >= 1, calls
            carried = tel.lines["AA-BB"].counters["a>b"]["bytes_out"]
            assert carried < 1.5 * size  # resumed, not sent again from its start on each call
        finally:
            for daemon in d.values():
                daemon.stop()


def test_both_ends_calling_at_once_make_one_call_that_carries_both_ways(pair):
    vl, d = pair
    modems = vl.lines["AA-BB"].modems
    with mccs.connect(d["AA"].config, "P") as a, mccs.connect(d["BB"].config, "P") as b:
        a.send("BBP", b"from AA")
        b.send("AAP", b"from BB")
        got_b, got_a = b.recv(timeout=60), a.recv(timeout=60)
    assert (got_a.data, got_b.data) == (b"from BB", b"from AA")
    assert modems[0].counters["answered"] + modems[1].counters["answered"] == 1  # one call, both ways


@pytest.mark.slow  # waits for the next whole minute of the wall clock: up to three minutes
@pytest.mark.timeout(360)
def test_a_scheduled_line_waits_for_its_window_on_the_wall_clock(tmp_path):
    start = datetime.fromtimestamp(time.time() + 90).replace(second=0, microsecond=0)
    window = f"{start:%H:%M}-{start + timedelta(minutes=2):%H:%M}"
    with Lines(str(tmp_path / "tel"), ["AA-BB"], baud=BAUD, modems=True) as tel:
        d = {"AA": DaemonProcess(write_config(tmp_path, "AA", [_line(tel, "AA", "BB", call="schedule",
                                                                     schedule=[window])])),
             "BB": DaemonProcess(write_config(tmp_path, "BB", [_line(tel, "BB", "AA", dial="")]))}
        for daemon in d.values():
            daemon.start()
        try:
            assert _call(d["AA"], "BB")["window"].startswith("closed until")
            with mccs.connect(d["AA"].config, "S") as s, mccs.connect(d["BB"].config, "R") as r:
                s.send("BBR", b"in the window")
                got = r.recv(timeout=200)
                assert got is not None and got.data == b"in the window"
                assert datetime.now() >= start  # not before the window opened
            assert _call(d["AA"], "BB")["window"] == "open"
        finally:
            for daemon in d.values():
                daemon.stop()


def test_a_tiny_run_of_the_calls_bench_gives_sane_figures(tmp_path):
    from mccs.testbed.bench_calls import measure
    out = measure(tmp_path, BAUD, runs=1, burst=10)
    assert out["calls"] == 2  # one for the timed message (and the one after it), one for the burst
    assert out["connected_delivery_s"] < out["setup_delivery_s"] < 30
    assert 40 <= out["modem_bytes_per_call"] <= 200 and 100 <= out["signon_bytes_per_call"] <= 2000
    assert 0.1 < out["burst_data_share"] <= 1.0
