"""Issue 32, item 2, with real daemons on a real pty line: a relay without the secret rewrites
EPOCH= in every async sign-on frame and recomputes the FCS. Before, the sign-on went through and
each end took the other for a host started afresh (its duplicate window forgotten, numbering
restarted); now the proofs cover every sign-on field, so no sign-on succeeds while the relay
tampers, and what was sent meanwhile crosses exactly once after it stops."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

import mccs
from linedrivers.async_frames import encode_frame, unstuff
from linedrivers.crc import le16, x25
from mccs.testbed.hosts import DaemonProcess, wait_until, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(180)
FLAG = b"\x7e"


class EpochRewriter:
    """A relay's byte filter (vserial Line.tamper): while `on`, every S, T and V frame gets another
    EPOCH= and a good FCS again; the bytes after the last flag wait for the rest of their frame."""

    def __init__(self) -> None:
        self.on, self.rewritten = False, 0
        self._tail = {"a>b": b"", "b>a": b""}
        self._lock = threading.Lock()  # read by the test, written by the relay thread

    def __call__(self, direction: str, data: bytes) -> bytes:
        with self._lock:
            data, self._tail[direction] = self._tail[direction] + data, b""
            if not self.on:
                return data
            cut = data.rfind(FLAG) + 1
            self._tail[direction] = data[cut:]
            return FLAG.join(self._frame(raw) for raw in data[:cut].split(FLAG))

    def _frame(self, raw: bytes) -> bytes:
        content = unstuff(raw)
        if not content or len(content) < 6 or content[0] not in b"STV" or le16(x25(content[:-2])) != content[-2:]:
            return raw
        body = re.sub(rb"EPOCH=[0-9a-f]+", lambda m: b"EPOCH=0badc0de" if m[0] != b"EPOCH=0badc0de"
                      else b"EPOCH=1badc0de", content[3:-2])
        if body == content[3:-2]:
            return raw
        self.rewritten += 1
        return encode_frame(chr(content[0]), content[1], content[2], body)[1:-1]


def _line(d: DaemonProcess) -> dict:
    with mccs.connect(d.config, None) as admin:
        return admin.status()["lines"][0]


def _traced(d: DaemonProcess, kind: str) -> int:
    return sum(f'"kind":"{kind}"'.encode() in line for p in Path(d.cfg.trace_dir).glob("*.jsonl")
               for line in p.read_bytes().splitlines())


def test_a_relay_rewriting_the_epoch_gets_no_signon_and_loses_nothing(tmp_path):
    baud = 115200
    secret = tmp_path / "line.key"
    secret.write_text("correct horse battery staple 42")
    secret.chmod(0o600)
    relay = EpochRewriter()
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=baud, tamper=relay) as vl:
        keys = {"protocol": "async", "baud": baud, "secret_file": str(secret), **timers(baud)}

        def host(me, peer):
            return DaemonProcess(write_config(tmp_path, me, [{"peer": peer, "port": vl.port(me, peer), **keys}]))
        a, b = host("AA", "BB"), host("BB", "AA")
        with a.start(), b.start():
            with mccs.connect(a.config, "SND") as snd, mccs.connect(b.config, "RCV") as rcv:
                snd.send("BBRCV", b"before")  # a clean sign-on: each end stores the other's epoch
                assert rcv.recv(timeout=15).data == b"before"
                epochs = (_line(a)["peer_epoch"], _line(b)["peer_epoch"])
                assert all(epochs)
                relay.on = True
                b.stop()  # BB signs on again when it comes back, through the relay
                sent = [b"during %d" % i for i in range(5)]
                for data in sent:
                    snd.send("BBRCV", data)
                b.start()
                wait_until(lambda: relay.rewritten >= 6 and _traced(a, "signon_refused")
                           and _traced(b, "signon_refused"), 30, "sign-ons refused at both ends")
                deadline = time.monotonic() + 4
                while time.monotonic() < deadline:  # no sign-on succeeds while the relay tampers
                    assert _line(a)["state"] != "UP" and _line(b)["state"] != "UP"
                    time.sleep(0.2)
                assert rcv.recv(wait=False) is None
                refused = _line(a)["counters"].get("refused", 0) + _line(b)["counters"].get("refused", 0)
                assert refused >= 2 and _line(b)["counters"].get("ups", 0) == 0
                relay.on = False
                got = [rcv.recv(timeout=20) for _ in sent]
                assert [m.data for m in got if m] == sent
                assert rcv.recv(timeout=1) is None  # each exactly once
                line_a, line_b = _line(a), _line(b)
    assert line_a["state"] == line_b["state"] == "UP"
    assert (line_a["peer_epoch"], line_b["peer_epoch"]) == epochs
    assert not line_a["counters"].get("peer_renewed") and not line_b["counters"].get("peer_renewed")
