"""Both line protocols end to end over real ptys (mccs.testbed.vserial) through pyserial (SerialPort,
Link, Station): 200 messages each way at once at 115200 baud, bit errors at 1e-4, and the
cable pulled in the middle. Station does what the daemon will: sign on again after DOWN,
re-queue unacked, drop duplicates across sign-ons by (origin, MSG_ID)."""
import time

import pytest

import linedrivers
from linedrivers.link import Station
from mccs.testbed.linesim import make_images
from mccs.testbed.vserial import Line

BAUD = 115200
N = 200


def machine(protocol, local, peer, role):
    """Short timers (this is a fast line) through the constructor keywords the daemon uses."""
    if protocol == "async":
        return linedrivers.AsyncLine(local, peer, window=8, baud=BAUD, reply_timeout=0.3,
                                     retry_limit=4, keepalive=1.0)
    return linedrivers.BscLine(local, peer, role=role, baud=BAUD, reply_timeout=0.3, retry_limit=4,
                               disconnect_timeout=2.0, ttd_timeout=0.2)


def finished(station):
    return len(station.received) == N and not station.queue and not station.in_machine


@pytest.mark.timeout(150)
@pytest.mark.parametrize("fault", ["disconnect", "hangup"])
@pytest.mark.parametrize("protocol", ["async", "bsc"])
def test_messages_each_way_arrive_once_in_order_across_errors_and_a_fault(tmp_path, protocol, fault):
    ends = str(tmp_path / "AA.BB"), str(tmp_path / "BB.AA")
    to_bb, to_aa = make_images("AA", "BB", N, seed=1), make_images("BB", "AA", N, seed=2)
    port = dict(baudrate=BAUD, backoff_max=0.4)
    with Line(*ends, baud=BAUD, ber=1e-4, seed=11) as line, \
            Station(machine(protocol, "AA", "BB", "primary"), ends[0], backoff=0.3, **port) as aa, \
            Station(machine(protocol, "BB", "AA", "secondary"), ends[1], backoff=0.3, **port) as bb:
        aa.send(to_bb)
        bb.send(to_aa)
        assert bb.wait(lambda s: len(s.received) >= N // 2, 60), f"stalled at {len(bb.received)}"
        getattr(line, fault)()  # pulled in the middle: silent cable, or the adapter gone
        deadline = time.monotonic() + 30
        while not (aa.downs or bb.downs) and time.monotonic() < deadline:
            time.sleep(0.05)  # the retries run out: the line must go DOWN
            time.sleep(0.5)  # a sign-on attempt or two into the dead line
        line.reconnect()
        assert aa.wait(finished, 90) and bb.wait(finished, 30), (
            f"aa got {len(aa.received)}, bb got {len(bb.received)}; downs {aa.downs} {bb.downs}")
        time.sleep(0.5)  # a late duplicate would show now
        flipped = sum(d["bits_flipped"] for d in line.counters.values())
        counters = aa.link.counters(), bb.link.counters()
    assert bb.received == to_bb  # every message once, in order
    assert aa.received == to_aa
    assert aa.acked >= N and bb.acked >= N
    assert flipped > 0 and sum(c["crc_errors"] for c in counters) > 0  # the bit errors were met
    if fault == "hangup":
        assert aa.link.port.counters["losses"] == 1 and aa.link.port.counters["opens"] == 2
