"""mccs.testbed.linesim itself: seeded channel impairments and the daemon-like harness."""
import pytest

from linedrivers.events import LineDown, LineUp, MessageAcked, MessageReceived
from mccs.testbed.linesim import Channel, DuplicateWindow, Harness, Impairments, make_images, run_pair


def _pipe_run(seed, data=bytes(range(256)) * 40, **imp):
    ch = Channel(seed, **imp)
    for i in range(0, len(data), 100):
        ch.ab.write(data[i:i + 100], now=i / 1000)
    return ch, ch.ab.take(1e9)


@pytest.mark.timeout(10)
def test_channel_is_seeded_and_counts_its_faults():
    imp = dict(ber=1e-3, drop=0.05, dup=0.05, drop_bytes=1e-3, delay=0.1)
    ch1, out1 = _pipe_run(7, **imp)
    ch2, out2 = _pipe_run(7, **imp)
    _, out3 = _pipe_run(8, **imp)
    assert out1 == out2 and out1 != out3
    st = ch1.ab.stats
    assert st.written == 10240 and st.delivered == len(out1)
    assert 40 < st.flipped_bits < 130  # ~82 expected at 1e-3 over 81,920 bits
    assert st.dropped_chunks and st.duplicated_chunks and st.dropped_bytes and st.delayed_chunks


@pytest.mark.timeout(10)
def test_clean_channel_is_transparent_and_paced():
    ch = Channel(baud=9600, latency=0.01)
    ch.ab.write(b"x" * 960, now=0.0)
    ch.ab.write(b"y" * 960, now=0.0)  # queues behind the first write on the wire
    assert ch.ab.next_arrival() == pytest.approx(1.01)
    assert ch.ab.take(1.0) == b""
    assert ch.ab.take(1.02) == b"x" * 960
    assert ch.ab.take(2.02) == b"y" * 960
    assert ch.ba.next_arrival() is None


@pytest.mark.timeout(10)
def test_delayed_chunks_never_overtake():
    ch = Channel(3, ab=Impairments(delay=0.5, delay_time=2.0, chunk=3))
    data = bytes(range(200))
    for i in range(0, 200, 10):
        ch.ab.write(data[i:i + 10], now=i / 100)
    assert ch.ab.take(1e9) == data


@pytest.mark.timeout(10)
def test_disconnect_swallows_writes():
    ch = Channel()
    ch.disconnect()
    ch.ab.write(b"lost", 0.0)
    ch.reconnect()
    ch.ab.write(b"kept", 0.0)
    assert ch.ab.take(1.0) == b"kept"


@pytest.mark.timeout(10)
def test_duplicate_window_forgets_the_oldest():
    w = DuplicateWindow(size=2)
    assert [w.seen(("AA", i)) for i in (1, 2, 1, 3, 1)] == [False, False, True, False, False]
    assert w.seen(("BB", 3)) is False


class Toy:
    """A minimal perfect-line machine (length-prefixed images, 1-byte acks) to test the harness."""

    def __init__(self):
        self.up, self.out, self.evs, self.inbuf = False, bytearray(), [], b""
        self.held, self.unconfirmed, self.counters = [], 0, {"frames_tx": 0}

    def start(self, now):
        self.out += b"\xff"

    def send(self, image):
        self.held.append(image)
        self.out += len(image).to_bytes(2, "big") + image
        self.counters["frames_tx"] += 1

    def receive_data(self, data, now):
        self.inbuf += data
        while self.inbuf:
            b = self.inbuf[0]
            if b == 0xFF:
                self.inbuf = self.inbuf[1:]
                if not self.up:
                    self.up = True
                    self.evs.append(LineUp("peer"))
                    self.out += b"\xff"
            elif b == 0xFE:
                self.inbuf = self.inbuf[1:]
                self.evs.append(MessageAcked(self.held.pop(0)))
            else:
                n = int.from_bytes(self.inbuf[:2], "big")
                if len(self.inbuf) < 2 + n:
                    return
                self.evs.append(MessageReceived(self.inbuf[2:2 + n]))
                self.unconfirmed += 1
                self.inbuf = self.inbuf[2 + n:]

    def data_to_send(self):
        out, self.out = bytes(self.out), bytearray()
        return out

    def events(self):
        evs, self.evs = self.evs, []
        return evs

    def next_deadline(self):
        return None

    def handle_timeout(self, now):
        pass

    def confirm(self):
        self.out += b"\xfe" * self.unconfirmed
        self.unconfirmed = 0

    def set_busy(self, flag):
        pass

    def room(self):
        return 4 - len(self.held) if self.up else 0

    def stop(self, now):
        pass


@pytest.mark.timeout(20)
def test_run_pair_delivers_and_checks():
    ma, mb = make_images("AA", "BB", 50, random_size=True), make_images("BB", "AA", 30)
    res = run_pair(Toy, Toy, ma, mb, channel=Channel(baud=9600))
    res.check()
    assert res.finished and res.a.received == mb and res.b.received == ma
    assert len(res.of("a", LineUp)) == 1 and res.a.counters["frames_tx"] == 50
    wire = sum(len(i) + 2 for i in ma) * 10 / 9600  # paced: never faster than the line
    assert wire + 2.0 <= res.time < 2 * wire + 2.0


@pytest.mark.timeout(20)
def test_check_catches_loss_and_the_harness_re_queues_after_down():
    h = Harness(Toy, Toy, channel=Channel(), start=("a",))
    h.send("a", make_images("AA", "BB", 5))
    h.run_for(1.0)
    assert len(h["b"].received) == 5 and h.done()
    h["a"].in_machine.extend(h["a"].sent[:2])  # pretend two were still held
    h["a"].machine.evs.append(LineDown("test", h["a"].sent[:2]))
    h.run_for(0.1)  # the two go out again: the duplicate window drops them at b
    assert h["a"].downs == ["test"] and h["b"].duplicates == 2 and len(h["b"].received) == 5
    with pytest.raises(AssertionError):
        run_pair(Toy, Toy, make_images("AA", "BB", 3), channel=Channel(drop=1.0), until=5).check()
