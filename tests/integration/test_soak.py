"""Soak (`./dev test -m slow`): 100,000 messages through a peer that is down most of the time,
killed (a crash) or stopped in turn, over a real virtual line between two real daemons."""
from __future__ import annotations

import os
import threading
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

COUNT = int(os.environ.get("MCCS_SOAK_COUNT", 100_000))  # a smaller count for a quick look
BAUD = 1_000_000  # the virtual line is paced fast: the soak is about the peer's absences, not the wire
UP, DOWN = 2.0, 6.0  # the peer is up a quarter of the time


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_soak_100000_messages_through_a_peer_that_is_mostly_down(tmp_path):
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=BAUD) as vl:
        keys = {"protocol": "async", "baud": BAUD, **timers(9600)}
        a = DaemonProcess(write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), **keys}],
                                       buffers=COUNT)).start()
        b = DaemonProcess(write_config(tmp_path, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"), **keys}],
                                       buffers=COUNT))
        sent: list[int] = []

        def send_all() -> None:
            with mccs.connect(a.config, "SRC") as src:
                for i in range(COUNT):
                    src.send("BBDST", b"%d" % i)
                    sent.append(i)
        sender = threading.Thread(target=send_all)
        sender.start()
        cycles = crashes = 0
        try:
            while sender.is_alive() or _left_on_send_list(a):
                b.start()
                time.sleep(UP)
                if cycles % 2 == 0:
                    b.kill()  # a crash: whatever BB acknowledged must be in its checkpoint
                    crashes += 1
                else:
                    b.stop()
                cycles += 1
                time.sleep(DOWN)
            sender.join()
            assert len(sent) == COUNT
            b.start()
            got = []
            with mccs.connect(b.config, "DST") as dst:
                while (m := dst.recv(wait=False)) is not None:
                    got.append(int(m.data))
            assert got == list(range(COUNT)), f"{len(got)} received; first wrong at " \
                f"{next((i for i, g in enumerate(got) if g != i), len(got))}"
            assert cycles >= 2 and crashes >= 1
        finally:
            a.stop()
            b.stop()


def _left_on_send_list(d: DaemonProcess) -> int:
    with mccs.connect(d.config, None) as admin:
        return admin.status()["lists"]["send"]
