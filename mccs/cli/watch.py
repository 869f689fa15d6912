"""`mccs status --watch`: the daemon's status redrawn every second, like `top`.

Plain text: on a terminal each frame clears the screen first (ANSI), elsewhere frames follow one
another, a blank line apart. Rates are the growth of the lines' byte counters between two
frames; with --json each frame is one line of JSON (the status, each line with its rates).
Ctrl-C ends it (exit 0). A daemon that stops is waited for: the frame says so until it answers.
"""
from __future__ import annotations

import json
import sys
import time

from mccs.client import Client, DaemonUnreachable
from mccs.cli.client import EXIT_OK, age_text, size_text, transfer_text

CLEAR = "\033[H\033[2J"
INTERVAL = 1.0


def run_watch(args) -> int:
    tty = sys.stdout.isatty()
    client, prev = None, None
    try:
        while True:
            start = time.monotonic()
            try:
                client = client or Client(args.config, None, connect_timeout=0.2, reconnect_timeout=1.0,
                                          grace=args.timeout)
                status = with_rates(client.status(), prev, start)
                prev = (start, status)
                frame = json.dumps(status) if args.json else render(status, time.time())
            except DaemonUnreachable as e:
                client, prev = None, None
                frame = json.dumps({"daemon": "not answering", "error": str(e)}) if args.json else \
                    f"{_clock(time.time())}  the daemon does not answer ({e}); trying again every second"
            if args.json:
                print(frame, flush=True)
            else:
                sys.stdout.write(f"{CLEAR}{frame}" if tty else f"{frame}\n\n")
                sys.stdout.flush()
            time.sleep(max(0.0, INTERVAL - (time.monotonic() - start)))
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if client is not None:
            client.close()


def with_rates(status: dict, prev: tuple[float, dict] | None, now: float) -> dict:
    """Each line's bytes/s in and out since the last frame (None in the first)."""
    before = {line["peer"]: line for line in prev[1]["lines"]} if prev else {}
    for line in status["lines"]:
        old = before.get(line["peer"])
        for key, counter in (("rate_in", "bytes_rx"), ("rate_out", "bytes_tx")):
            if prev is None or old is None or now <= prev[0]:  # no prev: no old either
                line[key] = None
            else:  # a port lost gets a fresh machine, whose counters start at 0 again
                grew = line["counters"].get(counter, 0) - old["counters"].get(counter, 0)
                line[key] = round(max(0, grew) / (now - prev[0]), 1)
    return status


def render(s: dict, wall: float) -> str:
    lists = s["lists"]
    out = [f"{_clock(wall)}  host {s['host']}  pid {s['pid']}  up {age_text(s['uptime'])}  (Ctrl-C to quit)",
           f"WAIT_LIST {lists['wait']}  SEND_LIST {lists['send']}  RECV_LIST {lists['recv']}  "
           f"MSG_IDs in use {s['msg_ids_in_use']}" + ("  DISK FULL" if s.get("disk_full") else ""), ""]
    rows = [("LINE", "PROTO", "STATE", "IN B/s", "OUT B/s", "WINDOW", "RETX/MIN", "IN TRANSFER")]
    for line in s["lines"]:
        rows.append((line["peer"], line["protocol"], line["state"], _rate(line.get("rate_in")),
                     _rate(line.get("rate_out")), f"{min(line['active'], line['window'])}/{line['window']}",
                     str(line["retransmissions_last_minute"]), _sending(line)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out += ["  ".join(c.rjust(w) if 3 <= i <= 6 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]
    oldest = s.get("oldest_waiting", {})
    out += ["", "OLDEST WAITING" if oldest else "nothing waits on SEND_LIST"]
    for dest, o in sorted(oldest.items()):
        out.append(f"to {dest}: {o['id']}, {size_text(o['size'])}, waiting {age_text(wall - o['stored'])}"
                   f"  ({s['waiting_for'].get(dest, 0)} in all)")
    return "\n".join(out) + "\n"


def _sending(line: dict) -> str:
    t = line.get("transfer")
    if t and t["bytes"] < t["total"]:
        return transfer_text(t)
    ids = line["in_flight"]
    return ", ".join(ids[:3]) + (f" +{len(ids) - 3}" if len(ids) > 3 else "") if ids else "-"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _clock(wall: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
