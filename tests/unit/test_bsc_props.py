"""Property tests (hypothesis) of the BSC receiver: arbitrary bytes never raise, never make the
machine say anything malformed, and the reader's result does not depend on how reads split."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linedrivers import BscLine
from linedrivers.bsc_codes import ASCII, EBCDIC
from linedrivers.bsc_reader import BscReader
from linedrivers.image import encode

pytestmark = pytest.mark.timeout(120)
CODES = {"ebcdic": EBCDIC, "ascii": ASCII}
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fresh_counters():
    return dict.fromkeys(("garbage", "crc_errors", "bad_sequences", "oversized"), 0)


@st.composite
def line_bytes(draw, cs):
    """Arbitrary bytes mixed with real sequences and blocks of the code set."""
    parts = draw(st.lists(st.one_of(
        st.binary(max_size=40),
        st.sampled_from([cs.sequence(k) for k in cs.bodies] + [cs.sequence("ENQ", cs.encode_id("BB"))]),
        st.binary(max_size=300).map(lambda t: b"".join(cs.blocks(t, 64))),
    ), max_size=12))
    return b"".join(parts)


def splits(data, cuts):
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[i:j] for i, j in zip([0] + points, points + [len(data)])]


@PROPS
@given(st.sampled_from(sorted(CODES)), st.data())
def test_reader_result_does_not_depend_on_read_sizes(code, data):
    cs = CODES[code]
    stream = data.draw(line_bytes(cs))
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=20))
    whole, whole_c = BscReader(cs, 256, fresh_counters()), fresh_counters()
    whole.counters = whole_c
    pieces, pieces_c = BscReader(cs, 256, fresh_counters()), fresh_counters()
    pieces.counters = pieces_c
    expected = whole.feed(stream)
    got = [s for chunk in splits(stream, cuts) for s in pieces.feed(chunk)]
    assert got == expected
    assert pieces_c == whole_c


@PROPS
@given(st.sampled_from(sorted(CODES)), st.one_of(st.binary(max_size=700), st.just(bytes(600))),
       st.integers(2, 300),
       st.lists(st.integers(0, 10_000), max_size=10), st.lists(st.integers(0, 10_000), max_size=5),
       st.binary(max_size=30))
def test_blocks_round_trip_with_idle_fill_and_garbage(code, text, block_size, cuts, fills, garbage):
    cs = CODES[code]
    garbage = bytes(b for b in garbage if b != cs.syn)  # noise without SYN can't hide a block
    blocks = cs.blocks(text, block_size)
    stream = b""
    for blk in blocks:
        body = blk[4:-5]  # between DLE STX and DLE ETX/ETB: DLE SYN may go between any two units
        units, i = [], 0
        while i < len(body):
            n = 2 if body[i] == cs.dle else 1
            units.append(body[i:i + n])
            i += n
        for f in sorted({f % (len(units) + 1) for f in fills}, reverse=True):
            units.insert(f, bytes([cs.dle, cs.syn]))
        stream += garbage + blk[:4] + b"".join(units) + blk[-5:]
    reader = BscReader(cs, 300, fresh_counters())
    got = [s for chunk in splits(stream, cuts) for s in reader.feed(chunk)]
    assert [s.kind for s in got] == ["ETB"] * (len(blocks) - 1) + ["ETX"]
    assert all(s.ok for s in got) and b"".join(s.data for s in got) == text
    assert all(x != y for x, y in zip(got, got[1:]))  # a block sent again can be told apart


@PROPS
@given(st.sampled_from(sorted(CODES)), st.binary(min_size=1, max_size=200), st.data())
def test_no_single_bit_error_passes_as_a_good_block(code, text, data):
    cs = CODES[code]
    (blk,) = cs.blocks(text, 256)
    bit = data.draw(st.integers(0, len(blk) * 8 - 9))  # any bit but the pad's
    bad = bytearray(blk)
    bad[bit // 8] ^= 1 << (bit % 8)
    reader = BscReader(cs, 300, fresh_counters())
    got = reader.feed(bytes(bad) + cs.sequence("EOT")) + reader.abort()
    assert not any(s.ok and s.kind in ("ETB", "ETX") and s.data != text for s in got)


def machine_in(state, code):
    """A machine brought to `state` by its peer's (scripted) sequences."""
    cs = CODES[code]
    m = BscLine("AA", "BB", role="secondary", code=code, block_size=64)
    if state == "DOWN":
        return m
    m.receive_data(cs.sequence("ENQ", cs.encode_id("BB")), 0.0)  # signed on, receiving
    if state == "RECV":
        return m
    m.receive_data(cs.sequence("EOT"), 0.1)
    if state == "CONTROL":
        return m
    m.send(encode("BBQ", "AAP", 1, 0, b"x" * 100))
    m.handle_timeout(0.2)  # bids
    if state == "BID":
        return m
    m.receive_data(cs.sequence("ACK0"), 0.3)  # sending: waits for the first block's reply
    return m


@PROPS
@given(st.sampled_from(["DOWN", "RECV", "CONTROL", "BID", "XMIT"]), st.sampled_from(sorted(CODES)),
       st.data())
def test_machine_takes_any_bytes_and_answers_only_well_formed_sequences(state, code, data):
    cs = CODES[code]
    m = machine_in(state, code)
    out = m.data_to_send()
    now = 1.0
    for _ in range(data.draw(st.integers(1, 6))):
        m.receive_data(data.draw(line_bytes(cs)), now)
        now += data.draw(st.floats(0, 30))
        d = m.next_deadline()
        if d is not None and d <= now:
            m.handle_timeout(now)
        m.confirm()
        out += m.data_to_send()
    assert m.state in ("DOWN", "SIGNON", "CONTROL", "BID", "XMIT", "RECV")
    assert all(v >= 0 for v in m.counters.values())
    assert 0 <= m.room() <= 32
    check = BscReader(cs, 300, fresh_counters())
    said = check.feed(out) + check.abort()
    assert check.counters == fresh_counters()  # nothing malformed, no bad BCC
    assert {s.kind for s in said} <= set(cs.bodies) | {"ETB", "ETX", "ID_ENQ", "ID_ACK0", "ID_NAK"}


@pytest.mark.parametrize("code", sorted(CODES))
def test_idle_syns_are_fill_however_long_they_run(code):
    """A modem fills an idle BSC line with SYNs: the reader keeps two of them (the next sequence
    may begin with them), not the whole run, which it read again at every read (an adversarial
    test: a full core and the run's length in memory after a minute of fill at 115,200 baud)."""
    cs = CODES[code]
    reader, counters = BscReader(cs, 256, fresh_counters()), fresh_counters()
    reader.counters = counters
    fill = bytes([cs.syn]) * 4096
    assert all(reader.feed(fill) == [] for _ in range(1000))
    assert reader.feed(bytes([cs.enq])) == [("ENQ", 3, True, b"", b"")]  # SYN SYN ENQ, not 4 MB of it
    assert reader.feed(fill[:5] + cs.sequence("EOT")[2:]) == [("EOT", 3, True, b"", b"")]
    assert counters == fresh_counters()  # fill is not garbage
