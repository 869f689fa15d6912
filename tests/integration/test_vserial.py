"""mccs.testbed.vserial: virtual null-modem lines over real ptys, read and written through pyserial."""
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import serial

from mccs.testbed.vserial import Line, Lines, flap


def open_port(path, timeout=0.2):
    return serial.Serial(path, baudrate=9600, timeout=timeout)


def read_exactly(port, n, deadline):
    """Read n bytes or whatever arrived before `deadline` (monotonic)."""
    got = bytearray()
    while len(got) < n and time.monotonic() < deadline:
        got += port.read(n - len(got))
    return bytes(got)


@pytest.fixture
def ends(tmp_path):
    return str(tmp_path / "AA.BB"), str(tmp_path / "BB.AA")


@pytest.mark.timeout(30)
def test_bytes_arrive_exactly_both_ways_at_once(ends):
    rng = random.Random(1)
    data_ab, data_ba = rng.randbytes(20000), rng.randbytes(20000)
    with Line(*ends, baud=115200), open_port(ends[0]) as a, open_port(ends[1]) as b:
        got = {}

        def reader(name, port, n):
            got[name] = read_exactly(port, n, time.monotonic() + 15)

        threads = [threading.Thread(target=reader, args=("ab", b, len(data_ab))),
                   threading.Thread(target=reader, args=("ba", a, len(data_ba)))]
        for t in threads:
            t.start()
        a.write(data_ab)
        b.write(data_ba)
        for t in threads:
            t.join()
    assert got["ab"] == data_ab
    assert got["ba"] == data_ba


@pytest.mark.timeout(30)
@pytest.mark.parametrize("baud,nbytes", [(9600, 1200), (115200, 23040)])
def test_pacing_matches_the_baud(ends, baud, nbytes):
    """A pty enforces no baud (FACTS.md): the relay must, at 10 bit times a byte."""
    expected = nbytes * 10 / baud
    with Line(*ends, baud=baud), open_port(ends[0]) as a, open_port(ends[1]) as b:
        cpu0, t0 = time.process_time(), time.monotonic()
        a.write(bytes(nbytes))
        got = read_exactly(b, nbytes, t0 + 3 * expected + 2)
        elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
    assert len(got) == nbytes
    rate = nbytes / elapsed
    assert 0.85 * baud / 10 <= rate <= 1.03 * baud / 10, f"{rate:.0f} B/s at {baud} baud"
    assert cpu < 0.6 * elapsed, f"relay and reader used {cpu:.2f} s CPU in {elapsed:.2f} s"


@pytest.mark.timeout(20)
def test_latency_is_one_way(ends):
    with Line(*ends, baud=115200, latency=0.25), open_port(ends[0]) as a, open_port(ends[1]) as b:
        t0 = time.monotonic()
        a.write(b"x")
        assert read_exactly(b, 1, t0 + 2) == b"x"
        one_way = time.monotonic() - t0
    assert 0.24 <= one_way <= 0.45


@pytest.mark.timeout(30)
def test_bit_error_rate(ends):
    nbytes, ber = 20000, 1e-3
    data = random.Random(2).randbytes(nbytes)
    with Line(*ends, baud=115200, ber=ber, seed=7) as line, open_port(ends[0]) as a, open_port(ends[1]) as b:
        a.write(data)
        got = read_exactly(b, nbytes, time.monotonic() + 10)
        flipped = line.counters["a>b"]["bits_flipped"]
    assert len(got) == nbytes
    errors = sum(bin(x ^ y).count("1") for x, y in zip(data, got))
    assert errors == flipped
    expected = nbytes * 8 * ber  # 160
    assert 0.6 * expected <= errors <= 1.4 * expected


@pytest.mark.timeout(30)
def test_dropped_and_inserted_bytes_are_counted(ends):
    data = bytes(range(256)) * 20
    with Line(*ends, baud=115200, drop=0.01, insert=0.01, seed=3) as line, \
            open_port(ends[0]) as a, open_port(ends[1], timeout=0.5) as b:
        a.write(data)
        got = bytearray()
        while chunk := b.read(1000):  # until 0.5 s of silence
            got += chunk
        c = line.counters["a>b"]
    assert c["dropped"] > 10 and c["inserted"] > 10
    assert len(got) == len(data) - c["dropped"] + c["inserted"]
    assert got != data


@pytest.mark.timeout(20)
def test_bytes_written_before_the_reader_opens_are_kept(ends):
    with Line(*ends, baud=115200):
        with open_port(ends[0]) as a:
            a.write(b"\x00\x7e\r\n\x03\x1a\x11\x13early")  # control bytes: no echo, no translation
            assert a.read(1) == b""  # nothing echoed back
        fd = os.open(ends[1], os.O_RDONLY | os.O_NOCTTY)  # pyserial's open() flushes input; os.open does not
        try:
            assert os.read(fd, 100) == b"\x00\x7e\r\n\x03\x1a\x11\x13early"
        finally:
            os.close(fd)


@pytest.mark.timeout(20)
def test_disconnect_is_silent_and_reconnect_restores(ends):
    with Line(*ends, baud=115200) as line, open_port(ends[0]) as a, open_port(ends[1]) as b:
        line.disconnect()
        a.write(b"lost in the cable")
        assert b.read(100) == b""  # silence, not an error
        line.reconnect()
        a.write(b"after")
        assert read_exactly(b, 5, time.monotonic() + 2) == b"after"
        assert line.counters["a>b"]["discarded"] == len(b"lost in the cable")


@pytest.mark.timeout(20)
def test_hangup_is_seen_by_readers_and_reconnect_gives_new_ptys(ends):
    with Line(*ends, baud=115200) as line:
        old = line.devices
        b = open_port(ends[1])
        line.hangup()
        with pytest.raises(serial.SerialException):
            for _ in range(10):
                b.read(1)
        b.close()
        assert not os.path.lexists(ends[0]) and not os.path.lexists(ends[1])
        with pytest.raises(serial.SerialException):
            open_port(ends[0])
        line.reconnect()
        assert os.path.realpath(ends[0]) == line.devices[0] and line.devices != ("", "")
        assert old != ("", "")
        with open_port(ends[0]) as a, open_port(ends[1]) as b:
            b.write(b"back")
            assert read_exactly(a, 4, time.monotonic() + 2) == b"back"


@pytest.mark.timeout(20)
def test_schedule_disconnects_and_reconnects(ends):
    states = []
    with Line(*ends, baud=115200, schedule=flap(0.3, 0.3)) as line:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            if not states or states[-1] != line.state:
                states.append(line.state)
            time.sleep(0.01)
    assert states[:4] == ["connected", "disconnected", "connected", "disconnected"]


@pytest.mark.timeout(20)
def test_log_sees_every_byte_with_direction_and_time(ends, tmp_path):
    seen = []
    log_file = tmp_path / "line.log"
    with Line(*ends, baud=115200, log=lambda d, data, t: seen.append((d, data, t))), \
            open_port(ends[0]) as a, open_port(ends[1]) as b:
        a.write(b"ping")
        assert read_exactly(b, 4, time.monotonic() + 2) == b"ping"
        b.write(b"pong")
        assert read_exactly(a, 4, time.monotonic() + 2) == b"pong"
    assert b"".join(d for k, d, _ in seen if k == "a>b") == b"ping"
    assert b"".join(d for k, d, _ in seen if k == "b>a") == b"pong"
    assert all(seen[i][2] <= seen[i + 1][2] for i in range(len(seen) - 1))
    with Line(*ends, baud=115200, log=str(log_file)) as line, open_port(ends[0]) as a, open_port(ends[1]) as b:
        a.write(b"\x7eAB")
        assert read_exactly(b, 3, time.monotonic() + 2) == b"\x7eAB"
        line.disconnect()
    fields = [ln.split() for ln in log_file.read_text().splitlines()]
    assert "".join(f[2] for f in fields if f[1] == "a>b") == "7e4142"
    assert ["event", "disconnect"] in [f[1:] for f in fields]
    assert abs(float(fields[0][0]) - time.time()) < 10


@pytest.mark.timeout(20)
def test_several_lines_for_a_network(tmp_path):
    with Lines(str(tmp_path), ["AA-BB", "BB-CC"], baud=115200, seed=1) as net:
        assert set(net.lines) == {"AA-BB", "BB-CC"}
        with open_port(net.port("BB", "CC")) as bc, open_port(net.port("CC", "BB")) as cb, \
                open_port(net.port("AA", "BB")) as ab:
            bc.write(b"to CC")
            assert read_exactly(cb, 5, time.monotonic() + 2) == b"to CC"
            assert ab.read(5) == b""  # lines are separate
    assert not os.path.lexists(net.port("AA", "BB"))


@pytest.mark.timeout(30)
def test_mccs_vserial_command(tmp_path):
    mccs = os.path.join(os.path.dirname(sys.executable), "mccs")
    help_text = subprocess.run([mccs, "vserial", "--help"], capture_output=True, text=True, timeout=20).stdout
    assert "--baud" in help_text and "mccs vserial --dir" in help_text
    proc = subprocess.Popen([mccs, "vserial", "--dir", str(tmp_path), "AA-BB", "--baud", "115200"],
                            stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("AA-BB:") and str(tmp_path / "AA.BB") in first and "/dev/pts/" in first
        with open_port(str(tmp_path / "AA.BB")) as a, open_port(str(tmp_path / "BB.AA")) as b:
            a.write(b"shell")
            assert read_exactly(b, 5, time.monotonic() + 2) == b"shell"
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "bytes_out" in out
    assert not os.path.lexists(tmp_path / "AA.BB")
