"""Priorities, `mccs ping` and quotas between real daemon processes over real pseudo-terminal
lines (vserial), paced to their baud as a serial line is."""
from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, wait_until, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines


@contextlib.contextmanager
def _chain(tmp_path, hosts: list[str], baud: int, processes: dict[str, list[dict]] | None = None, **line_keys):
    """Daemons joined one after the other by async vserial lines at `baud`; stopped at the end."""
    links = [f"{a}-{b}" for a, b in zip(hosts, hosts[1:])]
    keys = {"protocol": "async", "baud": baud, **timers(baud), **line_keys}
    daemons: dict[str, DaemonProcess] = {}
    with Lines(str(tmp_path / "dev"), links, baud=baud) as vl:
        try:
            for h in hosts:
                peers = [p for link in links for a, p in [link.split("-"), link.split("-")[::-1]] if a == h]
                lines = [{"peer": p, "port": vl.port(h, p), **keys} for p in peers]
                daemons[h] = DaemonProcess(write_config(tmp_path, h, lines, processes=(processes or {}).get(h, []),
                                                        max_message=4096)).start()
            yield daemons
        finally:
            for daemon in daemons.values():
                daemon.stop()


def _status(d: DaemonProcess) -> dict:
    with mccs.connect(d.config, None) as admin:
        return admin.status()


def _line_up(d: DaemonProcess, timeout: float = 30.0) -> None:
    wait_until(lambda: all(line["state"] == "UP" for line in _status(d)["lines"]), timeout, f"{d.cfg.id}: lines not up")


def _route(d: DaemonProcess, to: str, timeout: float = 30.0) -> None:
    wait_until(lambda: any(r["to"] == to and r["distance"] is not None for r in _status(d)["routes"]), timeout,
           f"{d.cfg.id}: no route to {to}")


def _urgent_wait(sender: DaemonProcess, receiver: DaemonProcess, bulk_sent) -> tuple[float, int]:
    """Send a priority-7 message while `bulk_sent()` has filled the line; seconds until the
    receiving process has it, and the bulk messages still waiting at the sender then."""
    got: dict = {}
    with mccs.connect(receiver.config, "R") as r:
        def take():
            got["msg"] = r.recv(user_id=4242, timeout=120)
            got["at"] = time.monotonic()
        taker = threading.Thread(target=take)
        taker.start()
        with mccs.connect(sender.config, "P") as p:
            bulk_sent(p)
            t0 = time.monotonic()
            p.send("BBR", b"urgent", 4242, priority=7)
        taker.join(150)
    assert got.get("msg") is not None and got["msg"].data == b"urgent"
    return got["at"] - t0, _status(sender)["lists"]["send"]


def _recv_ids(r, n: int, timeout: float, what: str) -> list[int]:
    """The MSG_IDs of the next `n` messages RECVed, in the order they came."""
    got = []
    while len(got) < n:
        msg = r.recv(timeout=timeout)
        assert msg is not None, f"{len(got)} of {n} {what} messages arrived"
        got.append(msg.msg_id)
    return got


@pytest.mark.slow  # over 25 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(240)
def test_an_urgent_message_overtakes_hundreds_queued_on_a_9600_baud_line_and_the_bulk_arrives_once_in_order(
        tmp_path):
    baud, n = 9600, 200
    with _chain(tmp_path, ["AA", "BB"], baud) as d:
        _line_up(d["AA"])
        bulk: list[int] = []

        def queue_bulk(p):
            bulk.extend(p.send("BBR", b"bulk %03d " % i + bytes(90), i + 1) for i in range(n))
            wait_until(lambda: _status(d["BB"])["lists"]["recv"] >= 5, 30, "the bulk does not flow")
        waited, left = _urgent_wait(d["AA"], d["BB"], queue_bulk)
        frame = (100 + 15 + 16 + 10) * 10 / baud  # a bulk frame: text, envelope, image header, framing
        print(f"\nPRIORITY 9600 baud: a priority-7 message behind {left} queued messages arrived in "
              f"{waited * 1000:.0f} ms; one bulk frame takes {frame * 1000:.0f} ms; "
              f"the queue takes {left * frame:.1f} s")
        assert left > n / 2, "the urgent message should not have waited for the bulk"
        with mccs.connect(d["BB"].config, "R") as r:
            got = _recv_ids(r, n, 120, "bulk")
            assert r.recv(wait=False) is None
        assert got == bulk  # in order, each once
        _cut_short(d["AA"], d["BB"])


@pytest.mark.timeout(240)
def test_an_urgent_message_goes_between_two_segments_of_a_large_transfer_at_9600_baud(tmp_path):
    baud, frame_max = 9600, 512
    with _chain(tmp_path, ["AA", "BB"], baud, frame_max=frame_max) as d:
        _line_up(d["AA"])
        big = bytes(range(256)) * 16  # 4 KiB: about 8 segments, 4.5 s at 9600 baud

        def queue_bulk(p):
            for _ in range(3):
                p.send("BBR", big)
            wait_until(lambda: (_status(d["AA"])["lines"][0]["transfer"] or {}).get("bytes", 0) > 0, 30,
                   "no transfer in segments")
        waited, left = _urgent_wait(d["AA"], d["BB"], queue_bulk)
        frame = (frame_max + 15 + 16 + 16 + 10) * 10 / baud
        print(f"\nPRIORITY 9600 baud, large transfer: a priority-7 message arrived in {waited * 1000:.0f} ms "
              f"with {left} messages still on the sender's SEND_LIST; "
              f"one segment frame takes at most {frame * 1000:.0f} ms, "
              f"a whole large message {len(big) * 10 / baud:.1f} s")
        assert left >= 2
        with mccs.connect(d["BB"].config, "R") as r:
            assert all(r.recv(timeout=120).data == big for _ in range(3))
        _cut_short(d["AA"], d["BB"])


def _cut_short(sender: DaemonProcess, receiver: DaemonProcess) -> None:
    """The urgent message cut short the frame on the wire (FEAT=ABORT, the default), and the peer
    dropped that frame as cut, not as damage."""
    tx, rx = (_status(d)["lines"][0] for d in (sender, receiver))
    assert "ABORT" in tx["features"] and tx["counters"]["aborts"] >= 1
    assert rx["counters"]["aborts_rx"] == tx["counters"]["aborts"] and rx["counters"]["crc_errors"] == 0


@pytest.mark.timeout(180)
def test_mccs_ping_across_two_hops_says_whether_a_process_is_attached_and_a_stopped_host_does_not_answer(tmp_path):
    with _chain(tmp_path, ["AA", "BB", "CC"], 115200) as d:
        _route(d["AA"], "CC")
        with mccs.connect(d["CC"].config, "LEDG"):
            done = mccs_cli("ping", "-c", str(d["AA"].config), "CCLEDG", "--count", "3", timeout=60)
            assert done.returncode == 0, done.stderr
            answers = [line for line in done.stdout.splitlines() if line.startswith("answer from CC")]
            assert len(answers) == 3 and all("LEDG attached" in a for a in answers), done.stdout
            assert "3 sent, 3 answered" in done.stdout
            print("\n" + done.stdout)
        with mccs.connect(d["AA"].config, None) as admin:
            pong = admin.ping("CCLEDG")
            assert pong is not None and pong.host == "CC" and pong.attached is False and pong.rtt > 0
            assert admin.ping("BB").attached is None
        aa = str(d["AA"].config)
        assert mccs_cli("send", "-c", aa, "--as", "P", "CCR", "x", "--priority", "8", timeout=30).returncode == 2
        done = mccs_cli("send", "-c", aa, "--as", "P", "CCR", "urgent", "--priority", "6", timeout=30)
        assert done.returncode == 0, done.stderr
        got = json.loads(mccs_cli("recv", "-c", str(d["CC"].config), "--as", "R", "--json", "--timeout", "30",
                                  timeout=60).stdout)
        assert got["text"] == "urgent" and got["msg_id"] == int(done.stdout)
        d["CC"].stop()
        done = mccs_cli("ping", "-c", aa, "CC", "--timeout", "2", timeout=60)
        assert done.returncode == 1 and "no answer from CC" in done.stdout, (done.stdout, done.stderr)
        done = mccs_cli("ping", "-c", str(d["AA"].config), "ZZ", timeout=60)
        assert done.returncode == 2 and "unknown" in done.stderr
        assert d["AA"].running and d["BB"].running


@pytest.mark.timeout(240)
def test_a_quota_reached_holds_that_name_at_the_sender_while_other_names_flow_and_nothing_is_lost(tmp_path):
    cap, n = 5, 60
    with _chain(tmp_path, ["AA", "BB"], 115200, {"BB": [{"name": "LEDG", "max_waiting": cap}]}) as d:
        _line_up(d["AA"])
        with mccs.connect(d["AA"].config, "P") as p:
            ledg = [p.send("BBLEDG", b"ledger %d" % i) for i in range(n)]
            wait_until(lambda: _status(d["AA"])["waiting_for"].get("BB", 0) >= n - cap - 16 and
                   _status(d["BB"])["lists"]["recv"] >= cap, 30, "the quota does not hold the sender")
            pay = [p.send("BBPAY", b"pay %d" % i) for i in range(20)]
        with mccs.connect(d["BB"].config, "PAY") as r:
            assert [r.recv(timeout=30).msg_id for _ in pay] == pay  # another name keeps flowing
        entries = json.loads(mccs_cli("queue", "list", "--json", "-c", str(d["BB"].config), timeout=30).stdout)
        waiting = [e for e in entries["entries"] if e["to"] == "BBLEDG"]
        held_back = _status(d["AA"])["waiting_for"].get("BB", 0)
        print(f"\nQUOTA max_waiting={cap}: {len(waiting)} wait at BB for LEDG, {held_back} wait at AA")
        assert cap <= len(waiting) <= cap + 16 and held_back >= n - len(waiting) - 1
        with mccs.connect(d["BB"].config, "LEDG") as r:
            got = _recv_ids(r, n, 60, "held")
        assert got == ledg
        wait_until(lambda: _status(d["AA"])["lists"]["send"] == 0, 10, "AA never had the last one acknowledged")
