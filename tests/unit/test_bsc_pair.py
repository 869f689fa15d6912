"""Two BscLines through mccs.testbed.linesim's seeded channel and daemon-like harness: every message
arrives once and in order, both ways at once, through noise, loss, delay, busy receivers,
restarts and pulled cables (the harness signs on again after DOWN and re-queues `unacked`)."""
import pytest

from linedrivers import BscLine
from mccs.testbed.linesim import Channel, Harness, make_images, run_pair

N = 1000


def pair(code="ebcdic", **kw):
    return (lambda: BscLine("AA", "BB", code=code, **kw),
            lambda: BscLine("BB", "AA", role="secondary", code=code, **kw))


def total(res, key):
    return res.a.counters[key] + res.b.counters[key]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code,seed", [("ebcdic", 1), ("ascii", 2)])
def test_thousand_each_way_through_a_noisy_line(code, seed):
    channel = Channel(seed=seed, ber=1e-3, drop_bytes=1e-4, drop=0.002, delay=0.01, baud=9600,
                      chunk=16 if code == "ascii" else None)
    res = run_pair(*pair(code), make_images("AA", "BB", N), make_images("BB", "AA", N), channel=channel)
    res.check()
    assert res.finished
    # the impairments really bit: bad BCCs, NAKs, garbage, timeouts, and DOWN + sign-on again
    assert total(res, "crc_errors") > 100 and total(res, "naks") > 100 and total(res, "garbage") > 0
    assert total(res, "timeouts") > 10 and len(res.a.downs) > 5 and total(res, "signons") > 10
    # both wanted to send at once: the line was contended and handed over both ways
    assert total(res, "collisions") > 0 and res.a.counters["rvis"] > 0 and res.b.counters["rvis"] > 0


@pytest.mark.timeout(60)
def test_bytes_held_longer_than_the_reply_timeout():
    channel = Channel(seed=3, ber=3e-4, delay=0.05, delay_time=6.0, baud=9600)
    res = run_pair(*pair(), make_images("AA", "BB", 300), make_images("BB", "AA", 300), channel=channel)
    res.check()
    assert total(res, "timeouts") > 10


@pytest.mark.timeout(60)
def test_busy_receiver_gets_wack_and_nothing_is_lost():
    channel = Channel(seed=4, ber=3e-4, baud=9600)
    res = run_pair(*pair(), make_images("AA", "BB", 200), make_images("BB", "AA", 200), channel=channel,
                   recv_capacity=3, drain_rate=2, confirm_delay=0.05)
    res.check()
    assert total(res, "wacks") > 10


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
def test_multi_block_messages_of_every_size(code):
    channel = Channel(seed=5, ber=5e-4, drop_bytes=1e-4, delay=0.01, baud=9600)
    msgs = [make_images(s, d, 200, size=300, random_size=True, seed=5) for s, d in (("AA", "BB"), ("BB", "AA"))]
    res = run_pair(*pair(code, block_size=50, max_message=300), *msgs, channel=channel)
    res.check()
    assert total(res, "crc_errors") > 10


@pytest.mark.timeout(60)
def test_restarts_and_pulled_cables():
    h = Harness(*pair(), channel=Channel(seed=6, ber=3e-4, baud=9600, latency=0.01))
    h.send("a", make_images("AA", "BB", 300))
    h.send("b", make_images("BB", "AA", 300))
    h.at(20, lambda h: h.restart("a"))
    h.at(45, lambda h: h.restart("b"))
    h.at(47.3, lambda h: h.restart("a"))
    h.at(60, lambda h: h.channel.disconnect())
    h.at(65, lambda h: h.channel.reconnect())
    h.at(80, lambda h: h.channel.disconnect())
    h.at(110, lambda h: h.channel.reconnect())
    res = h.result(h.run(36000, settle=5))
    res.check()
    assert "peer restarted" in res.a.downs + res.b.downs
    assert any(r.startswith("retry limit") for r in res.a.downs + res.b.downs)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", range(40))
def test_soak_many_seeds(seed):
    code = "ascii" if seed % 2 else "ebcdic"
    channel = Channel(seed=100 + seed, ber=1e-3, drop_bytes=1e-4, drop=0.002, delay=0.02, delay_time=1.0,
                      baud=9600, chunk=(None, 7, 64)[seed % 3])
    res = run_pair(*pair(code, block_size=(256, 64)[seed % 2], max_message=200),
                   make_images("AA", "BB", N, size=200, random_size=True, seed=seed),
                   make_images("BB", "AA", N, size=200, random_size=True, seed=seed),
                   channel=channel, recv_capacity=(None, 4)[seed % 2], drain_rate=(None, 5)[seed % 2],
                   confirm_delay=0.01)
    res.check()
    assert len(res.a.received) == len(res.b.received) == N
