"""Traffic processes for `mccs loopback`: real processes that SEND and RECV through the library.

A sender logs `msg_id seq send_time to_id` for every SEND once the library returned its MSG_ID;
a receiver logs `from_id seq send_time recv_time msg_id` for every message RECV returned. The
message carries its sender's sequence number and send time, so the loopback runner can find
lost, duplicated and reordered messages and latencies from the logs alone.

    python -m mccs.testbed.traffic send CONFIG NAME LOG PLAN       (PLAN: a file of TO_IDs, one a line)
    python -m mccs.testbed.traffic recv CONFIG NAME LOG STOPFILE [FORGET_EVERY]

FORGET_EVERY (a test of the verdict, not of MCCS): the receiver leaves every Nth message it got
out of its log, as if it had been lost, so the runner must report a failure.
"""
from __future__ import annotations

import os
import sys
import time

import mccs


def encode(seq: int, sent: float, size: int) -> bytes:
    head = f"{seq} {sent:.6f} ".encode()
    return head + b"." * max(0, size - len(head))


def decode(data: bytes) -> tuple[int, float]:
    seq, sent = data.split(b" ", 2)[:2]
    return int(seq), float(sent)


def send(config: str, name: str, log: str, plan: str, size: str = "64") -> None:
    targets = open(plan).read().split()
    with mccs.connect(config, name, connect_timeout=60, reconnect_timeout=120) as client, \
            open(log, "a", buffering=1) as out:
        for seq, to_id in enumerate(targets):
            sent = time.time()
            msg_id = client.send(to_id, encode(seq, sent, int(size)))
            out.write(f"{msg_id} {seq} {sent:.6f} {to_id}\n")


def recv(config: str, name: str, log: str, stopfile: str, forget_every: str = "0") -> None:
    with mccs.connect(config, name, connect_timeout=60, reconnect_timeout=120) as client, \
            open(log, "a", buffering=1) as out:
        got = 0
        while True:
            msg = client.recv(timeout=0.5)
            if msg is None:
                if os.path.exists(stopfile):
                    return
                continue
            got += 1
            if int(forget_every) and got % int(forget_every) == 0:
                continue
            seq, sent = decode(msg.data)
            out.write(f"{msg.from_id.rstrip()} {seq} {sent:.6f} {time.time():.6f} {msg.msg_id}\n")


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"send": send, "recv": recv}[mode](*args)
