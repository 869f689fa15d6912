"""`mccs bench calls`: what a call costs on a demand line (docs/CALLS.md), over emulated Hayes
modems (`mccs vserial --modem`) between two real daemons.

- **set-up**: SEND to delivery of one message on an idle demand line, the call included (init,
  dial, ring, CONNECT, sign-on), median of the runs; beside it, the same on the line once the
  call is up.
- **bytes a call**: what goes to and from the modems outside the call (AT commands, results) and
  the protocol's sign-on frames, from the daemons' traces and the modems' counters.
- **burst**: 100 messages of 128 bytes in one call: the seconds connected (to the idle hang-up
  excluded: from CONNECT to the last delivery) and the share of them the line spent carrying the
  message frames at its baud.

With `--uucp`, Taylor UUCP's `uucico` calls over the same emulated modems for the same figures,
side by side (mccs/testbed/bench_uucp.py); skipped, saying so, where uucico is not installed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

BAUD = 9600
SIZE = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("What a call costs on a demand line over emulated Hayes modems between two daemons:\n"
                          "SEND-to-delivery on an idle line (call set-up included), the modem's and the\n"
                          "sign-on's bytes a call, and the share of a call's connected time that carries\n"
                          "data for a burst of messages. Medians of runs.")
    parser.epilog = "example:\n  mccs bench calls --runs 3 --burst 100 --uucp"
    parser.add_argument("--baud", type=int, default=BAUD, help="line speed (default %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="calls timed (default %(default)s); the median")
    parser.add_argument("--burst", type=int, default=100,
                        help="messages of 128 bytes in one call (default %(default)s)")
    parser.add_argument("--uucp", action="store_true",
                        help="also Taylor UUCP calling over the same emulated modems, side by side")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")


def _events(trace_dir: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(trace_dir.glob("*.jsonl")) for line in f.read_text().splitlines()]


def _quiet(aa, bb) -> None:
    """Until both ends are on hook: the next call starts from an idle line. (What waits then is
    custody's own, which makes no call: it goes with the next.)"""
    while True:
        st = {"BB": aa.status(), "AA": bb.status()}
        if all(next(ln for ln in s["lines"] if ln["peer"] == peer).get("call") == "idle" for peer, s in st.items()):
            return
        time.sleep(0.2)


def measure(root: Path, baud: int, runs: int, burst: int) -> dict:
    import mccs
    from mccs.testbed.hosts import DaemonProcess, write_config
    from mccs.testbed.loopback import timers
    from mccs.testbed.vserial import Lines

    out: dict = {"baud": baud, "runs": runs, "burst": burst}
    with Lines(str(root / "tel"), ["AA-BB"], baud=baud, modems=True) as tel:
        keys = {"protocol": "async", "baud": baud, **timers(baud), "call": "demand", "answer": True,
                "idle_hangup": 2.0}
        d = {h: DaemonProcess(write_config(root, h, [{"peer": p, "port": tel.port(h, p), "dial": tel.number(p, h),
                                                      **keys}]))
             for h, p in (("AA", "BB"), ("BB", "AA"))}
        for daemon in d.values():
            daemon.start()
        try:
            with mccs.connect(d["AA"].config, "S") as s, mccs.connect(d["BB"].config, "R") as r, \
                    mccs.connect(d["AA"].config, None) as admin, mccs.connect(d["BB"].config, None) as other:
                idle, up = [], []
                for i in range(runs):
                    _quiet(admin, other)
                    t0 = time.monotonic()
                    s.send("BBR", b"x" * SIZE)
                    r.recv(timeout=120)
                    idle.append(time.monotonic() - t0)
                    t0 = time.monotonic()
                    s.send("BBR", b"y" * SIZE)  # the call is up: the line alone
                    r.recv(timeout=60)
                    up.append(time.monotonic() - t0)
                _quiet(admin, other)
                t_burst = time.time()
                s.send_many([("BBR", bytes([i % 256]) * SIZE) for i in range(burst)])
                for _ in range(burst):
                    r.recv(timeout=300)
                t_last = time.time()
                _quiet(admin, other)
                counters = next(ln for ln in admin.status()["lines"] if ln["peer"] == "BB")["counters"]
            out["setup_delivery_s"] = statistics.median(idle)
            out["connected_delivery_s"] = statistics.median(up)
            out["setup_runs"] = [round(x, 3) for x in idle]
        finally:
            for daemon in d.values():
                daemon.stop()
        modems = tel.lines["AA-BB"].modems
        assert modems is not None
        events = _events(root / "trace" / "AA")
    calls = [e for e in events if e["type"] == "call"]
    connects = [e["ts"] for e in calls if e["kind"] == "connect"]
    signon = [e for e in events if e["type"] == "frame" and e["kind"] in ("S", "T", "V")]
    out["calls"] = len(connects)
    out["signon_bytes_per_call"] = sum(e["bytes"] for e in signon) / max(1, len(connects))
    out["modem_bytes_per_call"] = counters["modem_bytes"] / max(1, len(connects))  # AT commands and results
    last_connect = min(t for t in connects if t >= t_burst)  # the burst's call
    data = [e for e in events if e["type"] == "frame" and e["kind"] == "D" and e["dir"] == "tx"
            and last_connect <= e["ts"] <= t_last]
    seconds = t_last - last_connect
    out["burst_connected_s"] = round(seconds, 3)
    out["burst_data_bytes"] = sum(e["bytes"] for e in data)
    out["burst_data_share"] = round(out["burst_data_bytes"] * 10 / baud / seconds, 4)
    out["burst_payload_share"] = round(burst * SIZE * 10 / baud / seconds, 4)  # as bench_uucp's
    out["modem_calls"] = modems[0].counters["calls"]
    out["modem_port_bytes_per_call"] = modems[0].counters["command_bytes"] / max(1, len(connects))  # the emulator's
    return out


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="mccs-bench-calls-") as tmp:
        result = measure(Path(tmp), args.baud, args.runs, args.burst)
        if args.uucp:
            from mccs.testbed.bench_uucp import compare
            result["uucp"] = compare(Path(tmp) / "uucp", args.baud, args.runs, args.burst)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"a demand line over emulated Hayes modems at {result['baud']} baud ({result['calls']} calls):")
    print(f"  SEND to delivery on an idle line, the call included: {result['setup_delivery_s']:.2f} s (median of "
          f"{result['runs']}: {result['setup_runs']}); on the line once the call is up: "
          f"{result['connected_delivery_s']:.3f} s")
    print(f"  a call's modem commands and results: {result['modem_bytes_per_call']:.0f} bytes on the port; its "
          f"sign-on frames: {result['signon_bytes_per_call']:.0f} bytes on the line")
    print(f"  a burst of {result['burst']} messages of {SIZE} bytes: {result['burst_connected_s']:.1f} s connected "
          f"to the last delivery, {result['burst_data_share']:.1%} of it carrying the message frames")
    if "uucp" in result:
        from mccs.testbed.bench_uucp import side_by_side
        print("side by side with Taylor UUCP calling over the same emulated modems:")
        print("\n".join(side_by_side(result)))
    return 0
