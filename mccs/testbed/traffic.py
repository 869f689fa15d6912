"""Traffic processes for `mccs loopback`: real processes that SEND and RECV through the library.

A sender logs `msg_id seq send_time to_id` for every SEND once the library returned its MSG_ID;
a receiver logs `from_id seq send_time recv_time msg_id e2e` for every message RECV returned. The
message carries its sender's sequence number and send time, so the loopback runner can find
lost, duplicated and reordered messages and latencies from the logs alone.

    python -m mccs.testbed.traffic send CONFIG NAME LOG PLAN [SIZE] [--ttl S] [--receipt] [--notices FILE STOPFILE]
    python -m mccs.testbed.traffic recv CONFIG NAME LOG STOPFILE [FORGET_EVERY]

PLAN is a file of TO_IDs, one a line. A sender with `--notices` also RECVs, until STOPFILE
exists, the notices its daemon's process MCCS sends back about its messages (undeliverable, and
delivered for those sent with `--receipt`), and logs each as a line of JSON: the notice's text
with its `from_id`, `user_id`, own MSG_ID (`own_msg_id`) and the time it was received (`got`).

FORGET_EVERY (a test of the verdict, not of MCCS): the receiver leaves every Nth message it got
out of its log, as if it had been lost, so the runner must report a failure.

A RECV that waits when its daemon is killed rides through the restart; one whose daemon is not
back before the RECV's timeout and the library's grace raises DaemonUnreachable. The loop here
then hangs up and asks again with the same Client (which remembers the messages it returned, so
a copy handed again after the restart is still dropped), as a user's process would: a restart
that takes long is not a failure of the run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import mccs


def encode(seq: int, sent: float, size: int) -> bytes:
    head = f"{seq} {sent:.6f} ".encode()
    return head + b"." * max(0, size - len(head))


def decode(data: bytes) -> tuple[int, float]:
    seq, sent = data.split(b" ", 2)[:2]
    return int(seq), float(sent)


def connect(config: str, name: str) -> mccs.Client:
    """A traffic process's connection: it waits for a daemon that is being restarted."""
    return mccs.connect(config, name, connect_timeout=60, reconnect_timeout=120)


def receive(client: mccs.Client, stopfile: str, handle: Callable[[mccs.Message], object],
            poll: float = 0.5) -> None:
    """RECV and `handle` every message until `stopfile` exists (looked at whenever a RECV of
    `poll` seconds returns nothing). A DaemonUnreachable (the daemon was down longer than the
    RECV's timeout and the grace) hangs up, so that a RECV's reply still coming on that connection
    hands nothing to it, and asks again on a new one (said on stderr)."""
    while True:
        try:
            msg = client.recv(timeout=poll)
        except mccs.DaemonUnreachable as e:
            print(f"traffic {client.name}: {e}; asking again", file=sys.stderr, flush=True)
            client.close()  # the next recv() connects again (within the client's reconnect_timeout)
            msg = None
        if msg is None:
            if os.path.exists(stopfile):
                return
            continue
        handle(msg)


def notice_line(msg: mccs.Message) -> str:
    """A notice as the sender logs it: its JSON text with its FROM_ID, USER_ID and arrival time
    (a message that is not JSON is logged with `notice` None, for the verdict to count)."""
    try:
        notice = json.loads(msg.data)
    except ValueError:
        notice = {}
    if not isinstance(notice, dict):
        notice = {}
    return json.dumps({"notice": None, **notice, "from_id": msg.from_id.rstrip(), "user_id": msg.user_id,
                       "own_msg_id": msg.msg_id, "got": round(time.time(), 6)}) + "\n"


def send(config: str, name: str, log: str, plan: str, size: int = 64, ttl: float | None = None,
         receipt: bool = False, notices: tuple[str, str] | None = None) -> None:
    """SEND the plan's messages; with `notices` (LOG, STOPFILE), a thread RECVs the notices
    meanwhile and after, until STOPFILE exists (a second connection under the same name: only it
    RECVs), and logs them in LOG."""
    targets = Path(plan).read_text().split()
    listener, failed = None, []
    if notices:
        notice_log, stopfile = notices

        def listen() -> None:
            try:
                with connect(config, name) as client, open(notice_log, "a", buffering=1) as out:
                    receive(client, stopfile, lambda msg: out.write(notice_line(msg)))
            except BaseException as e:  # the process must fail, not go on without its notices
                failed.append(e)
                raise
        listener = threading.Thread(target=listen, name="notices", daemon=True)
        listener.start()
    with connect(config, name) as client, open(log, "a", buffering=1) as out:
        for seq, to_id in enumerate(targets):
            if failed:
                break
            sent = time.time()
            msg_id = client.send(to_id, encode(seq, sent, size), ttl=ttl, receipt=receipt)
            out.write(f"{msg_id} {seq} {sent:.6f} {to_id}\n")
    if listener is not None:
        listener.join()
    if failed:
        sys.exit(f"traffic {name}: the notice thread failed: {failed[0]!r}")


def recv(config: str, name: str, log: str, stopfile: str, forget_every: int = 0) -> None:
    got = 0

    def handle(msg: mccs.Message) -> None:
        nonlocal got
        got += 1
        if forget_every and got % forget_every == 0:
            return
        seq, sent = decode(msg.data)
        out.write(f"{msg.from_id.rstrip()} {seq} {sent:.6f} {time.time():.6f} {msg.msg_id} {msg.e2e}\n")
    with connect(config, name) as client, open(log, "a", buffering=1) as out:
        receive(client, stopfile, handle)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m mccs.testbed.traffic")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    for arg in ("config", "name", "log", "plan"):
        s.add_argument(arg)
    s.add_argument("size", type=int, nargs="?", default=64)
    s.add_argument("--ttl", type=float, default=None)
    s.add_argument("--receipt", action="store_true")
    s.add_argument("--notices", nargs=2, metavar=("FILE", "STOPFILE"), default=None)
    r = sub.add_parser("recv")
    for arg in ("config", "name", "log", "stopfile"):
        r.add_argument(arg)
    r.add_argument("forget_every", type=int, nargs="?", default=0)
    a = p.parse_args(argv)
    if a.mode == "send":
        send(a.config, a.name, a.log, a.plan, a.size, a.ttl, a.receipt, a.notices)
    else:
        recv(a.config, a.name, a.log, a.stopfile, a.forget_every)


if __name__ == "__main__":
    main(sys.argv[1:])
