"""linedrivers.port.SerialPort over real ptys (mccs.testbed.vserial) and pyserial URLs."""
import os
import queue
import socket
import time

import pytest

from linedrivers.port import SerialPort
from mccs.testbed.vserial import Line


class Recorder:
    """Collects what a SerialPort reports, for a test to wait on."""

    def __init__(self):
        self.data = bytearray()
        self.states = queue.Queue()
        self.raw = []

    def on_data(self, data, now):
        assert isinstance(now, float)
        self.data += data

    def on_state(self, is_open, reason):
        self.states.put((is_open, reason))

    def raw_hook(self, direction, data, now):
        self.raw.append((direction, data, now))

    def port(self, url, **kw):
        return SerialPort(url, on_data=self.on_data, on_state=self.on_state, raw_hook=self.raw_hook, **kw)

    def wait_data(self, n, timeout=5.0):
        end = time.monotonic() + timeout
        while len(self.data) < n and time.monotonic() < end:
            time.sleep(0.01)
        return bytes(self.data)

    def wait_state(self, timeout=5.0):
        return self.states.get(timeout=timeout)


@pytest.fixture
def line(tmp_path):
    with Line(str(tmp_path / "AA.BB"), str(tmp_path / "BB.AA"), baud=115200) as ln:
        yield ln


@pytest.mark.timeout(20)
def test_two_ports_exchange_bytes_and_the_hook_sees_them(line):
    ra, rb = Recorder(), Recorder()
    with ra.port(line.end_a, baudrate=115200) as a, rb.port(line.end_b, baudrate=115200) as b:
        assert ra.wait_state() == (True, "open") and rb.wait_state() == (True, "open")
        assert a.is_open and b.is_open
        a.write(b"hello ")
        a.write(b"world")
        b.write(bytes(range(256)))
        assert rb.wait_data(11) == b"hello world"
        assert ra.wait_data(256) == bytes(range(256))
        time.sleep(0.1)
        assert a.counters["bytes_out"] == 11 and a.counters["bytes_in"] == 256
        assert b.counters["bytes_in"] == 11 and a.counters["opens"] == 1
    assert b"".join(d for k, d, _ in ra.raw if k == "tx") == b"hello world"
    assert b"".join(d for k, d, _ in ra.raw if k == "rx") == bytes(range(256))
    assert not a.is_open


@pytest.mark.timeout(20)
def test_port_reopens_after_a_hangup(line):
    ra, rb = Recorder(), Recorder()
    with ra.port(line.end_a, backoff_max=0.4) as a, rb.port(line.end_b, backoff_max=0.4):
        assert ra.wait_state()[0] and rb.wait_state()[0]
        line.hangup()
        is_open, reason = rb.wait_state()
        assert not is_open and "read failed" in reason
        assert not ra.wait_state()[0]
        a.write(b"into the void")  # dropped while closed, counted
        assert a.counters["dropped_out"] >= 13
        time.sleep(0.5)  # the ports retry while the device names are gone
        line.reconnect()
        assert ra.wait_state() == (True, "open") and rb.wait_state() == (True, "open")
        a.write(b"again")
        assert rb.wait_data(5) == b"again"
        assert a.counters["opens"] == 2 and a.counters["losses"] == 1
        assert a.counters["open_failures"] >= 1


@pytest.mark.timeout(20)
def test_port_waits_for_a_device_that_appears_later(tmp_path):
    r = Recorder()
    with r.port(str(tmp_path / "AA.BB"), backoff_max=0.2) as a:
        time.sleep(0.5)
        assert not a.is_open and a.counters["open_failures"] >= 2
        a.write(b"early")
        assert a.counters["dropped_out"] == 5
        with Line(str(tmp_path / "AA.BB"), str(tmp_path / "BB.AA"), baud=115200):
            assert r.wait_state() == (True, "open")
            assert a.is_open


@pytest.mark.timeout(20)
def test_exclusive_keeps_a_second_opener_out(line):
    r1, r2 = Recorder(), Recorder()
    with r1.port(line.end_a) as first:
        assert r1.wait_state()[0]
        with r2.port(line.end_a, backoff_max=0.2) as second:
            time.sleep(0.6)
            assert not second.is_open and second.counters["open_failures"] >= 2
            assert "exclusively lock" in second.last_error
        assert first.is_open


@pytest.mark.timeout(20)
def test_loop_url_without_exclusive_support():
    r = Recorder()
    with r.port("loop://", baudrate=115200) as p:
        assert r.wait_state() == (True, "open")
        p.write(b"round trip")
        assert r.wait_data(10) == b"round trip"


@pytest.mark.timeout(20)
def test_socket_url_and_its_loss_are_handled():
    """socket:// (a terminal server) takes no exclusive lock; a dropped connection is a lost port."""
    server = socket.create_server(("127.0.0.1", 0))
    r = Recorder()
    with server, r.port(f"socket://127.0.0.1:{server.getsockname()[1]}", backoff_max=0.2) as p:
        conn, _ = server.accept()
        assert r.wait_state() == (True, "open")
        conn.sendall(b"from the server")
        assert r.wait_data(15) == b"from the server"
        conn.close()
        is_open, reason = r.wait_state()
        assert not is_open and reason
        conn, _ = server.accept()  # and it connects again
        assert r.wait_state() == (True, "open")
        p.write(b"again")
        conn.settimeout(5)
        assert conn.recv(5) == b"again"
        conn.close()


@pytest.mark.timeout(20)
def test_close_is_prompt_and_bad_urls_do_not_crash(line):
    r = Recorder()
    p = r.port(line.end_a).start()
    assert r.wait_state()[0]
    t0 = time.monotonic()
    p.close()
    assert time.monotonic() - t0 < 0.5
    bad = Recorder().port("nosuchscheme://x", backoff_max=0.2).start()
    time.sleep(0.3)
    assert not bad.is_open and bad.counters["open_failures"] >= 1
    bad.close()


@pytest.mark.timeout(20)
def test_bytes_written_just_before_close_still_leave(line):
    """The daemon writes its sign-off and closes the port: the sign-off must not be lost."""
    ra, rb = Recorder(), Recorder()
    with rb.port(line.end_b):
        a = ra.port(line.end_a).start()
        assert ra.wait_state()[0] and rb.wait_state()[0]
        a.write(b"sign-off")
        a.close()
        assert rb.wait_data(8) == b"sign-off"
        assert a.counters["bytes_out"] == 8


@pytest.mark.timeout(30)
def test_writes_keep_their_order_when_the_port_fills():
    """Many writes while nobody reads the far end: the first go straight into the pty, the rest
    queue for the writer thread once it is full, and the far end gets every byte in order."""
    master, slave = os.openpty()
    try:
        rec = Recorder()
        with rec.port(os.ttyname(slave)) as a:
            assert rec.wait_state() == (True, "open")
            chunks = [bytes([n % 251]) * 997 for n in range(400)]  # ~400 KB: more than a pty holds
            for c in chunks:
                a.write(c)
            assert a._queued > 0  # the pty filled, so the rest went through the writer thread
            got, want = bytearray(), b"".join(chunks)
            while len(got) < len(want):
                got += os.read(master, 65536)
            assert got == want
            end = time.monotonic() + 5
            while a.counters["bytes_out"] < len(want) and time.monotonic() < end:
                time.sleep(0.01)
            assert a.counters["bytes_out"] == len(want)
            assert b"".join(d for direction, d, _ in rec.raw if direction == "tx") == want
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.timeout(30)
def test_with_a_loop_the_loop_reads_and_a_hangup_still_reopens(line):
    """Loop mode (the daemon's): the event loop reads the pty itself and on_data runs on it; the
    port's loss is still seen, reported and repaired, and close() on the loop returns at once."""
    import asyncio
    import threading

    async def main():
        loop = asyncio.get_running_loop()
        got, threads = bytearray(), set()
        states = asyncio.Queue()

        def on_data(data, now):
            threads.add(threading.get_ident())
            got.extend(data)

        def on_state(is_open, reason):
            loop.call_soon_threadsafe(states.put_nowait, (is_open, reason))

        async def until(cond):
            for _ in range(500):
                if cond():
                    return True
                await asyncio.sleep(0.01)
            return False

        a = SerialPort(line.end_a, baudrate=115200, on_data=on_data, on_state=on_state, loop=loop,
                       backoff_max=0.4).start()
        rb = Recorder()
        with rb.port(line.end_b, baudrate=115200, backoff_max=0.4) as b:
            assert await asyncio.wait_for(states.get(), 5) == (True, "open") and rb.wait_state()[0]
            b.write(b"to the loop")
            assert await until(lambda: bytes(got) == b"to the loop")
            assert threads == {threading.get_ident()} and a.counters["bytes_in"] == 11
            line.hangup()
            is_open, reason = await asyncio.wait_for(states.get(), 5)
            assert not is_open and ("read failed" in reason or "no data" in reason)
            line.reconnect()
            assert await asyncio.wait_for(states.get(), 5) == (True, "open")
            assert rb.wait_state()[0] is False and rb.wait_state()[0] is True
            b.write(b" again")
            assert await until(lambda: bytes(got) == b"to the loop again")
            t0 = time.monotonic()
            a.close()  # on the loop: the loop cannot be asked, so close() takes the port off it
            assert time.monotonic() - t0 < 1.5 and not a.is_open
            assert a.counters["opens"] == 2 and a.counters["losses"] == 1

    asyncio.run(main())


async def _on_the_loop(port: SerialPort) -> None:
    """Until the loop reads the port: "open" is told from the reader thread before it asks the
    loop to take the port, and gather() does nothing before that."""
    import asyncio
    for _ in range(500):
        if port._loop_fd is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the loop never took the port")


@pytest.mark.timeout(30)
def test_a_hangup_while_the_port_gathers_is_seen_at_once(line):
    """gather() pauses the port in the epoll of its own that the loop watches; a hang-up still
    wakes the loop there, so the loss is reported long before the gather would have ended."""
    import asyncio

    from linedrivers.port import GATHER_MAX

    async def main():
        loop = asyncio.get_running_loop()
        states = asyncio.Queue()
        a = SerialPort(line.end_a, baudrate=50, on_data=lambda data, now: None, loop=loop,
                       on_state=lambda up, why: loop.call_soon_threadsafe(states.put_nowait, (up, why))).start()
        assert await asyncio.wait_for(states.get(), 5) == (True, "open")
        await _on_the_loop(a)
        a.gather(10**6)  # at 50 baud: the loop would not read for GATHER_MAX
        assert a._gathering is not None
        t0 = time.monotonic()
        line.hangup()
        is_open, _ = await asyncio.wait_for(states.get(), 5)
        assert not is_open and time.monotonic() - t0 < GATHER_MAX / 2  # about 1 ms; 50 ms when off the loop
        a.close()

    asyncio.run(main())


@pytest.mark.timeout(30)
def test_a_gather_waits_for_no_more_than_half_a_read(line):
    """What one wait lets come must fit one read (and what comes meanwhile the next): on a fast
    line a gather of many bytes ends after READ_SIZE / 2 of them, not after GATHER_MAX."""
    import asyncio

    from linedrivers.port import GATHER_MAX, READ_SIZE

    async def main():
        loop = asyncio.get_running_loop()
        opened = asyncio.Event()
        a = SerialPort(line.end_a, baudrate=921600, on_data=lambda data, now: None, loop=loop,
                       on_state=lambda up, why: loop.call_soon_threadsafe(opened.set)).start()
        await asyncio.wait_for(opened.wait(), 5)
        await _on_the_loop(a)
        a.gather(10**6)
        half = READ_SIZE // 2 * 10 / 921600  # 22 ms
        assert half < GATHER_MAX and a._gathering.when() - loop.time() <= half
        a.close()

    asyncio.run(main())


@pytest.mark.timeout(30)
def test_gather_lets_bytes_collect_on_the_loop_and_loses_none(tmp_path):
    """gather(n) (loop mode): the loop reads again once n bytes have had time to come at the baud,
    so a frame arriving at 9600 baud is handed over in a few reads, not one a byte; a wait for
    more than ever comes ends after GATHER_MAX, with every byte delivered."""
    import asyncio

    from linedrivers.port import GATHER_MAX

    async def main(line):
        loop = asyncio.get_running_loop()
        got, calls = bytearray(), []
        opened = asyncio.Event()
        a = None

        def on_data(data, now):
            calls.append(len(data))
            got.extend(data)
            a.gather(want - len(got) if len(got) < want else 10**6)  # the last: more than will come

        a = SerialPort(line.end_a, baudrate=9600, on_data=on_data, loop=loop,
                       on_state=lambda up, why: loop.call_soon_threadsafe(opened.set)).start()
        rb = Recorder()
        with rb.port(line.end_b, baudrate=9600) as b:
            await asyncio.wait_for(opened.wait(), 5)
            assert rb.wait_state()[0]
            want = 120
            payload = bytes(range(want))
            b.write(payload)
            for _ in range(300):
                if len(got) >= want:
                    break
                await asyncio.sleep(0.01)
            assert bytes(got) == payload
            assert len(calls) <= 6, calls  # 120 bytes at 9600 take 125 ms: about one read a ms without gather
            t0 = time.monotonic()
            b.write(b"tail")  # comes while the loop waits for 10**6 bytes: read at most GATHER_MAX later
            for _ in range(300):
                if bytes(got).endswith(b"tail"):
                    break
                await asyncio.sleep(0.005)
            assert bytes(got) == payload + b"tail" and time.monotonic() - t0 < GATHER_MAX + 0.2
            a.close()

    with Line(str(tmp_path / "AA.BB"), str(tmp_path / "BB.AA"), baud=9600) as line:
        asyncio.run(main(line))


@pytest.mark.timeout(30)
def test_a_gather_that_ends_with_nothing_come_keeps_the_port_and_reads_on(line):
    """When a gather's wait ends the port is read at once, on the loop's timer; a port in raw mode
    then reads nothing if nothing came, which is no loss (a hang-up would wake the loop's poll).
    While on_data gathers again from that read, the port stays paused: one turn of the loop a chunk."""
    import asyncio

    async def main():
        loop = asyncio.get_running_loop()
        states, got, paused = asyncio.Queue(), bytearray(), []
        a = None

        def on_data(data, now):
            got.extend(data)
            paused.append(a._paused)  # the read came from the gather's timer, the port still paused
            a.gather(10)

        a = SerialPort(line.end_a, baudrate=9600, on_data=on_data, loop=loop,
                       on_state=lambda up, why: loop.call_soon_threadsafe(states.put_nowait, (up, why))).start()
        rb = Recorder()
        with rb.port(line.end_b, baudrate=9600) as b:
            assert await asyncio.wait_for(states.get(), 5) == (True, "open") and rb.wait_state()[0]
            await _on_the_loop(a)
            for _ in range(3):  # 10 bytes at 9600 baud: about 10 ms each, and nothing comes
                a.gather(10)
                await asyncio.sleep(0.05)
            assert states.empty() and a.is_open and a.counters["losses"] == 0
            # about a second at 9600 baud: enough for three reads or more even when the loop turns
            # late on a loaded machine (200 bytes, 0.2 s, came in two reads on one under load)
            payload = bytes(range(256)) * 4
            b.write(payload)
            deadline = time.monotonic() + 10
            while len(got) < len(payload) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert bytes(got) == payload and states.empty()
            assert len(paused) >= 3 and all(paused[1:]), paused  # after the first, each read a gathered one
        a.close()

    asyncio.run(main())


@pytest.mark.timeout(20)
def test_a_pty_has_no_modem_lines_so_dtr_is_left_alone_and_no_carrier_is_reported(line):
    """A call line on a pty hangs up with the modem's escape (linedrivers.hayes): its port says it has
    no DTR or DCD, ignores set_dtr and never reports a carrier. Real serial ports have them; none here."""
    ra, rb = Recorder(), Recorder()
    carrier = []
    with ra.port(line.end_a, baudrate=115200, on_carrier=carrier.append) as a, \
            rb.port(line.end_b, baudrate=115200) as b:
        assert ra.wait_state() == (True, "open") and rb.wait_state() == (True, "open")
        assert not a.modem_lines and not b.modem_lines
        a.write(b"+++")
        a.set_dtr(False)
        a.write(b"ATH0\r")
        assert rb.wait_data(8) == b"+++ATH0\r"
        time.sleep(0.3)
        assert a.is_open and carrier == [] and a.counters["losses"] == 0
