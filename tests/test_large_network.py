"""Large messages between real daemon processes over a real pseudo-terminal line (issue 12):
`mccs send --file` and `mccs recv --out`, a kill -9 of the receiver half way, and the bytes the
line carried (vserial's counters)."""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

BAUD = 2_000_000  # paced: 200,000 bytes/s, so 4 MiB takes about 22 s
SIZE = 4 << 20


def _mccs(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return mccs_cli(*args, timeout=timeout, text=False)


@contextlib.contextmanager
def _pair(tmp_path, max_message: int, ber: float = 0.0):
    """Daemons AA and BB on one async vserial line; yields them and the line."""
    keys = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=BAUD, ber=ber, seed=12) as vl:
        a, b = (DaemonProcess(write_config(tmp_path, h, [{"peer": p, "port": vl.port(h, p), **keys}],
                                           max_message=max_message)) for h, p in (("AA", "BB"), ("BB", "AA")))
        try:
            a.start(), b.start()
            yield a, b, vl.lines["AA-BB"]
        finally:
            a.stop(), b.stop()


def _status(d: DaemonProcess) -> dict:
    with mccs.connect(d.config, None) as admin:
        return admin.status()


@pytest.mark.timeout(420)
def test_a_4_mib_file_survives_a_kill9_of_the_receiver_half_way_and_the_line_carries_it_about_once(tmp_path):
    data = random.Random(4).randbytes(SIZE)
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    with _pair(tmp_path, 16 << 20) as (a, b, line):
        sent = _mccs("send", "-c", str(a.config), "--as", "P", "BBR", "--file", str(src))
        assert sent.returncode == 0, sent.stderr
        msg_id = int(sent.stdout)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # half of it is in BB's checkpoint: kill -9
            partial = _status(b)["receiving"]
            if partial and partial[0]["bytes"] >= SIZE // 2:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the transfer did not get half way: {_status(a)['lines']}")
        b.kill()
        b.start()
        out = tmp_path / "out.bin"
        got = _mccs("recv", "-c", str(b.config), "--as", "R", "--timeout", "240", "--out", str(out), "--json",
                    timeout=300)
        assert got.returncode == 0, got.stderr
        about = json.loads(got.stdout)
        assert about["msg_id"] == msg_id and about["bytes"] == SIZE and about["from_id"] == "AAP   "
        assert out.read_bytes() == data
        again = _mccs("recv", "-c", str(b.config), "--as", "R", "--nowait")
        assert again.returncode == 1  # delivered once
        wire = line.counters
        towards_b = wire["a>b"]["bytes_in"]  # end a is AA's port
        assert towards_b <= 1.3 * SIZE, f"{towards_b} bytes on the wire for {SIZE}: {wire}"
        assert _status(a)["lists"]["send"] == 0
        assert not os.path.exists(f"{out}.part")


@pytest.mark.timeout(180)
def test_send_wait_delivered_follows_the_message_to_its_receipt(tmp_path):
    with _pair(tmp_path, 1 << 20) as (a, b, _):
        src = tmp_path / "in.bin"
        src.write_bytes(os.urandom(300_000))
        sender = subprocess.Popen([sys.executable, "-m", "mccs.cli", "send", "-c", str(a.config), "--as", "P",
                                   "BBR", "--file", str(src), "--wait-delivered"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got = _mccs("recv", "-c", str(b.config), "--as", "R", "--timeout", "120", "--out",
                    str(tmp_path / "out.bin"))
        assert got.returncode == 0, got.stderr
        out, err = sender.communicate(timeout=60)
        assert sender.returncode == 0, err
        assert b"delivered" in err and (tmp_path / "out.bin").read_bytes() == src.read_bytes()


@pytest.mark.timeout(180)
def test_on_a_noisy_line_parity_mends_the_frames_of_a_large_message(tmp_path):
    """FEAT=FEC between real daemons: one damaged byte in about 10,000; the long frames go with
    parity once the line has shown damage, the receiver mends them, few are sent again."""
    data = random.Random(5).randbytes(1 << 20)
    with _pair(tmp_path, 1 << 20, ber=1.25e-5) as (a, b, line):
        with mccs.connect(a.config, "P") as p, mccs.connect(b.config, "R") as r:
            p.send("BBR", data)
            got = r.recv(timeout=120)
        assert got.data == data
        sent, taken = _status(a)["lines"][0]["counters"], _status(b)["lines"][0]["counters"]
        assert "FEC" in _status(a)["lines"][0]["features"]
        assert line.counters["a>b"]["bits_flipped"] > 30  # about 84 expected
        assert sent["fec_frames"] > 50 and taken["fec_mended"] > 10
        assert sent["retransmissions"] < sent["fec_frames"] / 10
