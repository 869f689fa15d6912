"""Line authentication (docs/PROTOCOL.md, "Line authentication") for AsyncLine and BscLine through
the in-memory line simulator: delivery with the same secret, refusals, replayed sign-ons and
frames, forged frames with good CRCs. secret=None is the old wire, covered by the other tests."""
import hashlib
import random
import re
from dataclasses import fields, replace

import pytest

from linedrivers import AsyncLine, BscLine
from linedrivers.async_line import SignOn, encode_frame, unstuff
from linedrivers.async_signon import covered
from linedrivers.auth import AUTH_FAILED, INITIATOR, RESPONDER, TRAILER_SIZE, Handshake, hkdf
from linedrivers.bsc_agree import ALTERED
from linedrivers.bsc_codes import CODE_SETS, CodeSet
from linedrivers.events import FrameTraced, LineDown, LineUp, MessageReceived, PeerRefused
from linedrivers.image import encode
from mccs.testbed.linesim import Channel, Harness, make_images, run_pair

pytestmark = pytest.mark.timeout(120)

SECRET, OTHER = b"0123456789abcdef-line-AA-BB", b"fedcba9876543210-line-AA-BB"
BEFORE_PROOFS_2 = "2eb9022"  # line drivers whose proofs covered no sign-on field (version 1)


def machines(proto, secret_a=SECRET, secret_b=SECRET, code="ebcdic", **kw):
    """Factories for AA (BSC primary) and BB."""
    if proto == "async":
        return (lambda: AsyncLine("AA", "BB", secret=secret_a, **kw),
                lambda: AsyncLine("BB", "AA", secret=secret_b, **kw))
    return (lambda: BscLine("AA", "BB", code=code, secret=secret_a, **kw),
            lambda: BscLine("BB", "AA", role="secondary", code=code, secret=secret_b, **kw))


def record(h, side):
    """Every write of `side` from now on, in order (the pipe's own write still runs)."""
    pipe, log = h.channel.outof(side), []
    write = pipe.write

    def recording(data, now):
        log.append(bytes(data))
        write(data, now)
    pipe.write = recording
    return log


def inject(h, side, data):
    """Bytes that arrive at `side` as if the peer had sent them (not recorded)."""
    h.channel.towards(side).write(data, h.now)


def received(h, side):
    return [e for _, s, e in h.events if s == side and isinstance(e, MessageReceived)]


def refusals(h, side):
    """What `side` reported about refused sign-ons: PeerRefused reasons and 'refused...' downs."""
    peer = [e.reason for _, s, e in h.events if s == side and isinstance(e, PeerRefused)]
    return peer, [r for r in h[side].downs if r.startswith("refused")]


def async_frames(data):
    return [b"\x7e" + f + b"\x7e" for f in data.split(b"\x7e") if f]


# --- primitives --------------------------------------------------------------------------------
def test_hkdf_rfc5869_case_1():
    okm = hkdf(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c"
                         "5db02d56ecc4c5bf34007208d5b887185865")


def test_proofs_bind_role_nonces_and_hosts():
    hs = Handshake(SECRET, "AA", "BB", bytes(16), bytes(range(16)))
    p = hs.proof(INITIATOR)
    assert hs.verify(INITIATOR, p) and not hs.verify(RESPONDER, p)  # no reflection
    assert not hs.with_nonce(bytes([1] * 16)).verify(INITIATOR, p)   # a fresh nonce: a new proof
    assert not replace(hs, responder="CC").verify(INITIATOR, p)
    assert not replace(hs, secret=OTHER).verify(INITIATOR, p)
    assert not replace(hs, initiator_nonce=b"").verify(INITIATOR, replace(hs, initiator_nonce=b"").proof(INITIATOR))


def test_proofs_cover_every_signon_body_as_sent():
    hs = Handshake(SECRET, "AA", "BB", bytes(16), bytes(range(16))).covering(b"S body", b"T body")
    p = hs.proof(RESPONDER)
    assert hs.verify(RESPONDER, p) and not hs.covering(b"V body").verify(RESPONDER, p)
    for s, t in ((b"S bodz", b"T body"), (b"S body", b"T body "), (b"S bodyT body", b""), (b"T body", b"S body")):
        assert not replace(hs, bodies=(s, t)).verify(RESPONDER, p), (s, t)
    body = b"MCCS/1 HOST=BB WINDOW=8 PROOF=00ff X=1  EPOCH=0a"  # unknown tokens, spaces, order: as sent
    assert covered(body) == b"MCCS/1 HOST=BB WINDOW=8 X=1  EPOCH=0a" == covered(covered(body))


def test_frame_counters_survive_loss_and_wrap_and_refuse_replays():
    hs = Handshake(SECRET, "AA", "BB", bytes(16), bytes(range(16)))
    tx, rx = hs.frames("AA"), hs.frames("BB")
    assert (tx.tx_key, tx.rx_key) == (rx.rx_key, rx.tx_key) and tx.tx_key != tx.rx_key
    sent = [(b"D%d" % i, tx.seal(b"D%d" % i)) for i in range(70000)]
    for i in (0, 1, 5, 65000, 65536 + 4, 69999):  # gaps of up to 64995 frames, and a wrap
        assert rx.check(*sent[i]), i
    assert not rx.check(*sent[69999])                 # the same frame again
    assert not rx.check(*sent[65536 + 3])             # an older one (same low bits one wrap on)
    retransmitted = tx.seal(sent[69999][0])             # the same contents under a new counter
    assert rx.check(sent[69999][0], retransmitted)
    assert not rx.check(b"forged", tx.seal(b"other")) and not rx.check(b"x", b"short")
    assert rx.rx_count == 70001 and len(retransmitted) == TRAILER_SIZE


# --- same secret: delivery -------------------------------------------------------------------------
@pytest.mark.parametrize("proto,code", [("async", None), ("bsc", "ebcdic"), ("bsc", "ascii")])
def test_same_secret_delivers_exactly_once_in_order_through_noise(proto, code):
    channel = Channel(seed=5, ber=2e-4, drop=0.005, drop_bytes=1e-4, baud=9600)
    res = run_pair(*machines(proto, code=code or "ebcdic"), make_images("AA", "BB", 300),
                   make_images("BB", "AA", 300), channel=channel)
    res.check()
    assert res.finished and res.a.counters["crc_errors"] + res.b.counters["crc_errors"] > 10
    assert res.a.counters["retransmissions"] + res.b.counters["retransmissions"] > 0
    assert min(res.a.counters["signons"], res.b.counters["signons"]) >= 1


@pytest.mark.parametrize("proto", ["async", "bsc"])
def test_signing_on_from_either_end_or_both(proto):
    for start in (("a",), ("b",), ("a", "b")):
        res = run_pair(*machines(proto), make_images("AA", "BB", 20), make_images("BB", "AA", 20), start=start)
        res.check()
        assert not res.a.downs and not res.b.downs and res.a.ups == res.b.ups == 1, start


# --- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("proto", ["async", "bsc"])
@pytest.mark.parametrize("start", [("a",), ("b",), ("a", "b")])
def test_different_secrets_are_refused_on_both_sides(proto, start):
    h = Harness(*machines(proto, SECRET, OTHER), start=start, backoff=5)
    h.send("a", make_images("AA", "BB", 3))
    h.send("b", make_images("BB", "AA", 3))
    h.run_for(40)
    assert not h["a"].ups and not h["b"].ups and not received(h, "a") and not received(h, "b")
    for refusing, refused in (("a", "b"), ("b", "a")):
        if refusals(h, refusing)[0]:
            break
    else:
        raise AssertionError("nobody refused")
    assert all(r.startswith("failed authentication") for r in refusals(h, refusing)[0])
    assert "refused: authentication failed" in refusals(h, refused)[1]
    assert "authentication failed" in h[refusing].downs


@pytest.mark.parametrize("proto", ["async", "bsc"])
@pytest.mark.parametrize("start", [("a",), ("b",)])
def test_secret_against_no_secret_is_refused_not_hung(proto, start):
    h = Harness(*machines(proto, SECRET, None), start=start, backoff=5)
    h.send("a", make_images("AA", "BB", 3))
    h.run_for(30)
    assert not h["a"].ups and not h["b"].ups and not received(h, "b")
    starter, other = ("a", "b") if start == ("a",) else ("b", "a")
    # the end that signs on is told it was refused; the other says why it refused
    assert refusals(h, starter)[1] and not [d for d in h[starter].downs if d == "no answer"]
    assert refusals(h, other)[0]
    assert any("authentication" in r for r in refusals(h, other)[0])


class LegacyAsync(AsyncLine):
    """Today's async protocol before authentication: AUTH and PROOF are unknown fields, ignored."""

    def _signon_in(self, kind, body):
        signon = SignOn.parse(body)
        super()._signon_in(kind, replace(signon, nonce=b"", proof=b"").encode() if signon else body)


class LegacyCodes(CodeSet):
    """A code set read as before authentication: an ID is `MCCS` and whatever follows."""

    def parse_id(self, ident):
        return self.decode_id(ident), False, b""


def legacy_bsc(*args, **kw):
    m = BscLine(*args, **kw)
    m.cs = LegacyCodes(**{f.name: getattr(m.cs, f.name) for f in fields(CodeSet) if f.init})
    return m


@pytest.mark.parametrize("proto", ["async", "bsc"])
@pytest.mark.parametrize("start", [("a",), ("b",)])
def test_a_peer_predating_authentication_meets_a_clear_refusal(proto, start):
    if proto == "async":
        fa, fb = (lambda: AsyncLine("AA", "BB", secret=SECRET)), (lambda: LegacyAsync("BB", "AA"))
    else:
        fa, fb = (lambda: BscLine("AA", "BB", secret=SECRET)), (lambda: legacy_bsc("BB", "AA", role="secondary"))
    h = Harness(fa, fb, start=start, backoff=5)
    h.send("a", make_images("AA", "BB", 3))
    h.run_for(30)
    assert not received(h, "b") and not h["a"].ups
    assert h["a"].refused or "refused" in h["a"].downs
    assert h["b"].refused or "refused" in h["b"].downs
    assert "no answer" not in h["a"].downs + h["b"].downs


# --- replayed sign-ons -----------------------------------------------------------------------------
def first_session(proto, n=5):
    """A session signed on by AA (a) with BB (b): what each side wrote, and the harness."""
    h = Harness(*machines(proto), start=("a",))
    logs = {"a": record(h, "a"), "b": record(h, "b")}
    h.send("a", make_images("AA", "BB", n))
    h.send("b", make_images("BB", "AA", n))
    assert h.run(60)
    h.result().check()
    return h, logs


def _replay(victim, chunks: list[bytes], now: float) -> list:
    """Feed a recorded side of a session to a machine, 50 ms a chunk; its events."""
    events = []
    for chunk in chunks:
        victim.receive_data(chunk, now)
        victim.data_to_send()
        events += victim.events()
        now += 0.05
    return events


@pytest.mark.parametrize("proto", ["async", "bsc"])
def test_a_recorded_signon_replayed_to_the_answering_end_is_refused(proto):
    _, logs = first_session(proto)
    victim = machines(proto)[1]()
    events = _replay(victim, logs["a"], 100.0)
    assert [e.reason for e in events if isinstance(e, PeerRefused)] == [AUTH_FAILED]
    assert [e.reason for e in events if isinstance(e, LineDown)] == ["authentication failed"]
    assert not [e for e in events if isinstance(e, (LineUp, MessageReceived))]


@pytest.mark.parametrize("proto", ["async", "bsc"])
def test_a_recorded_answer_replayed_to_a_new_signon_never_signs_on(proto):
    _, logs = first_session(proto)
    victim = machines(proto)[0]()
    victim.start(100.0)
    victim.data_to_send()
    events = _replay(victim, logs["b"], 100.1)
    assert not [e for e in events if isinstance(e, (LineUp, MessageReceived))]
    if proto == "bsc":  # it answers the replayed ID ACK0 with a proof block; the old ACK1 fails
        assert victim.counters["auth_failures"] > 0


def test_a_recorded_t_with_its_session_rewritten_is_refused():
    _, logs = first_session("async")
    t_frame = next(f for chunk in logs["b"] for f in async_frames(chunk) if f[1:2] == b"T")
    victim = AsyncLine("AA", "BB", secret=SECRET)
    victim.start(100.0)
    victim.data_to_send()
    old = SignOn.parse(unstuff(t_frame[1:-1])[3:-2])
    victim.receive_data(encode_frame("T", body=replace(old, session=victim.session).encode()), 100.1)
    events = victim.events()
    assert [e.reason for e in events if isinstance(e, LineDown)] == ["authentication failed"]
    assert [e.peer for e in events if isinstance(e, PeerRefused)] == ["BB"]
    assert victim.data_to_send().startswith(b"\x7eO\x00\x00REFUSED authentication failed")


# --- sign-on fields changed on the line (issue 32) ----------------------------------------------------
EPOCHS = {"a": "0a0a0a0a", "b": "0b0b0b0b"}  # each side's own; its peer's LineUp must show it
CHANGES = {"EPOCH": "0c0c0c0c", "FEAT": "SREJ", "LARGE": "64", "WINDOW": "2", "MAXMSG": "64"}


def with_epochs(proto, **kw):
    """machines() with an epoch each and LARGE= offered (so BSC announces)."""
    def build(factory, epoch):
        def make():
            m = factory()
            m.epoch = epoch
            return m
        return make
    fa, fb = machines(proto, large=4096, **kw)
    return build(fa, EPOCHS["a"]), build(fb, EPOCHS["b"])


def rewrite(key: str, value: str):
    """What a relay without the secret does to a sign-on text: `KEY=` gets `value`."""
    return lambda text: re.sub(rf"(?<![^ ]){key}=[^ ]*", f"{key}={value}", text)


class Relay:
    """Rewrites what goes through the pipes out of `sides` with `retouch(data) -> data` while `on`."""

    def __init__(self, h, sides, retouch):
        self.on, self.hits, self.retouch = True, 0, retouch
        for side in sides:
            pipe = h.channel.outof(side)
            pipe.write = self._wrap(pipe.write)

    def _wrap(self, write):
        def relay(data, now):
            if self.on:
                changed = self.retouch(data)
                self.hits += changed != data
                data = changed
            write(data, now)
        return relay


def async_relay(h, kind: str, change) -> Relay:
    """Frames of `kind` either way get `change(body text)` and a good FCS again."""
    def frame(f: bytes) -> bytes:
        content = unstuff(f[1:-1])
        if not content or content[:1] != kind.encode():
            return f
        return encode_frame(kind, content[1], content[2], change(content[3:-2].decode()).encode())
    return Relay(h, "ab", lambda data: b"".join(frame(f) for f in async_frames(data)))


def bsc_relay(h, side: str, change, cs: CodeSet) -> Relay:
    """`side`'s announcements (`SYN SYN SOH text ETX BCC PAD`) get `change(text)` and a good BCC."""
    head = bytes([cs.syn, cs.syn, cs.soh])

    def retouch(data: bytes) -> bytes:
        start = data.find(head)
        if start < 0:
            return data
        end = data.index(bytes([cs.etx]), start)
        text = change(data[start + 3:end].decode(cs.codec)).encode(cs.codec)
        return data[:start] + cs.announcement(text) + data[end + 4:]
    return Relay(h, side, retouch)


def signed_on(h):
    """(side, the epoch its LineUp gave the peer) of every sign-on in force at some time."""
    return [(s, e.epoch) for _, s, e in h.events if isinstance(e, LineUp)]


def refused_by_one_and_told_the_other(h, reason):
    """The side that refused a sign-on with `reason` (the other was told): 'a' or 'b'."""
    for refusing, refused in (("a", "b"), ("b", "a")):
        if reason in refusals(h, refusing)[0] and refusals(h, refused)[1]:
            return refusing
    raise AssertionError(f"no sign-on refused with {reason!r}: {refusals(h, 'a')} {refusals(h, 'b')}")


def tamper_then_stop(h, relay, seconds=40):
    """Messages both ways while the relay tampers (nothing may cross), then delivered exactly once
    after it stops."""
    h.send("a", make_images("AA", "BB", 10))
    h.send("b", make_images("BB", "AA", 10))
    h.run_for(seconds)
    assert relay.hits >= 2 and not received(h, "a") and not received(h, "b")
    relay.on = False
    assert h.run(h.now + 600)
    h.result().check()
    assert not h["a"].duplicates and not h["b"].duplicates
    assert {s: e for s, e in signed_on(h)} == {"a": EPOCHS["b"], "b": EPOCHS["a"]}


@pytest.mark.parametrize("key", sorted(CHANGES) + ["NEWER"])
@pytest.mark.parametrize("kind", ["S", "T", "V"])
def test_an_async_signon_field_rewritten_by_a_relay_is_refused_at_both_ends(kind, key):
    """The relay has no secret but recomputes the FCS: before, a rewritten EPOCH= went through and
    each end forgot its duplicate window (issue 32). Every field of S, T and V is under a proof,
    and so is a token this version does not know (NEWER=, added)."""
    h = Harness(*with_epochs("async"), start=("a",), backoff=2)
    change = rewrite(key, CHANGES[key]) if key in CHANGES else lambda text: text + " NEWER=1"
    relay = async_relay(h, kind, change)
    h.run_for(1)
    ups = signed_on(h)
    if kind == "V":  # the initiator is UP on the T it checked (the peer's real values), then told
        assert ups == [("a", EPOCHS["b"])]
    else:
        assert not ups
    refusing = refused_by_one_and_told_the_other(h, AUTH_FAILED)
    assert refusing == ("b" if kind == "V" else "a")
    assert "authentication failed" in h[refusing].downs
    assert "refused: authentication failed" in h["a" if refusing == "b" else "b"].downs
    tamper_then_stop(h, relay)
    assert all(epoch == EPOCHS["b" if s == "a" else "a"] for s, epoch in signed_on(h))


def test_an_async_v_jammed_and_replaced_by_a_changed_copy_is_refused():
    """The real V never arrives; a copy with another EPOCH= (good FCS) comes in its place."""
    h = Harness(*with_epochs("async"), start=("a",), backoff=5)
    copies = []

    def jam(data):
        frames = async_frames(data)
        copies.extend(f for f in frames if f[1:2] == b"V")
        return b"".join(f for f in frames if f[1:2] != b"V")
    relay = Relay(h, "ab", jam)  # either end's V, whichever signs on
    h.run_for(0.5)
    assert copies and not [e for _, s, e in h.events if s == "b" and isinstance(e, (LineUp, PeerRefused))]
    v = unstuff(copies[0][1:-1])
    relay.on = False  # the injected copy goes past the jammer
    inject(h, "b", encode_frame("V", body=rewrite("EPOCH", "0c0c0c0c")(v[3:-2].decode()).encode()))
    relay.on = True
    h.run_for(1)
    assert signed_on(h) == [("a", EPOCHS["b"])]
    assert refusals(h, "b")[0] == [AUTH_FAILED] and "refused: authentication failed" in h["a"].downs
    tamper_then_stop(h, relay)


@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
@pytest.mark.parametrize("key", ["EPOCH", "FEAT", "LARGE", "MAXMSG"])
@pytest.mark.parametrize("side", ["a", "b"])
def test_a_bsc_announcement_rewritten_by_a_relay_is_refused(side, key, code):
    """The announcement is not sealed, but the commit block's digest, under the MAC, covers both:
    the answering station refuses (counted), the bidder is told, nothing crosses meanwhile."""
    h = Harness(*with_epochs("bsc", code=code), start=("a",), backoff=2)
    relay = bsc_relay(h, side, rewrite(key, CHANGES[key] if key != "FEAT" else "ROUTE2"), CODE_SETS[code])
    h.run_for(3)
    assert not signed_on(h)
    refusing = refused_by_one_and_told_the_other(h, ALTERED)
    assert ALTERED in h[refusing].downs
    tamper_then_stop(h, relay)


@pytest.mark.parametrize("start", [("a",), ("b",)])
def test_async_proofs_of_the_previous_version_are_refused_not_hung(linedrivers_at, start):
    """Both ends of an async line with a secret must run version 2 of the proofs: against version 1
    (the commit before), the sign-on is refused as a bad proof. (BSC's proof is unchanged:
    tests/unit/test_bsc_large.py signs on with a station of commit 5bef087.)"""
    old = linedrivers_at(BEFORE_PROOFS_2)
    h = Harness(machines("async")[0], lambda: old.AsyncLine("BB", "AA", secret=SECRET), start=start, backoff=5)
    h.send("a", make_images("AA", "BB", 3))
    h.send("b", make_images("BB", "AA", 3))
    h.run_for(30)
    assert not received(h, "a") and not received(h, "b") and not h["a"].ups
    assert [r for side in "ab" for r in refusals(h, side)[0] if r.startswith("failed authentication")]
    assert [r for side in "ab" for r in refusals(h, side)[1] if r == "refused: authentication failed"]
    assert "no answer" not in h["a"].downs + h["b"].downs


# --- forged and replayed frames --------------------------------------------------------------------
def forged_async(rng):
    kind = rng.choice("DANBPO")
    body = make_images("AA", "BB", 1, rng.randint(0, 40), seed=rng.random())[0] if kind == "D" else b""
    return encode_frame(kind, rng.randrange(256), rng.randrange(256), body + rng.randbytes(TRAILER_SIZE))


def forged_bsc(rng, cs):
    if rng.random() < 0.5:
        text = make_images("AA", "BB", 1, rng.randint(0, 40), seed=rng.random())[0]
        return cs.block(text + rng.randbytes(TRAILER_SIZE), rng.random() < 0.7)
    return cs.sequence(rng.choice(sorted(cs.bodies)), trailer=rng.randbytes(TRAILER_SIZE))


@pytest.mark.parametrize("proto", ["async", "bsc"])
def test_forged_frames_with_good_crcs_are_dropped_counted_and_traced(proto):
    rng, cs = random.Random(7), CODE_SETS["ebcdic"]
    h = Harness(*machines(proto), channel=Channel(baud=9600))
    assert h.run(10, stop=lambda h: h["a"].up and h["b"].up)
    h.send("a", make_images("AA", "BB", 200))
    h.send("b", make_images("BB", "AA", 200))
    forged = {"a": 0, "b": 0}

    def forge(h):
        side = rng.choice("ab")
        inject(h, side, forged_async(rng) if proto == "async" else forged_bsc(rng, cs))
        forged[side] += 1
        if not h.done():
            h.at(h.now + rng.uniform(0.01, 0.5), forge)
    h.at(h.now + 0.01, forge)
    assert h.run(3600)
    h.result().check()
    assert not h["a"].duplicates and not h["b"].duplicates
    for side in "ab":
        assert forged[side] > 10
        assert h[side].machine.counters["auth_failures"] == forged[side]
        bad = [e for _, s, e in h.events if s == side and isinstance(e, FrameTraced) and e.dir == "rx" and not e.ok]
        assert len(bad) == forged[side]
        assert len(received(h, side)) == 200  # each message reported once by the machine itself


def test_async_data_frame_replayed_after_the_sequence_wrapped_is_dropped():
    h = Harness(*machines("async"), start=("a",))
    log = record(h, "a")
    images = make_images("AA", "BB", 300)
    h.send("a", images)
    assert h.run(600)
    # D 44 of the first lap: without a MAC it would be the next frame b expects (300 mod 256)
    d44 = next(f for chunk in log for f in async_frames(chunk) if f[1:3] == b"D\x2c")
    assert h["b"].machine._rx_next == 44
    inject(h, "b", d44)
    h.run_for(5)
    assert len(received(h, "b")) == 300 and h["b"].machine.counters["auth_failures"] == 1
    assert h["b"].machine.counters["duplicates"] == 0 and h["a"].up and h["b"].up


@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
def test_bsc_block_and_reply_replayed_in_the_same_session_are_dropped(code):
    cs = CODE_SETS[code]
    h = Harness(*machines("bsc", code=code), start=("a",))
    logs = {"a": record(h, "a"), "b": record(h, "b")}
    h.send("a", make_images("AA", "BB", 5))
    assert h.run(60)
    block = next(c for c in logs["a"] if c.startswith(bytes([cs.syn, cs.syn, cs.dle, cs.stx])) and len(c) > 60)
    ack = next(c for c in logs["b"] if c.startswith(bytes([cs.syn, cs.syn, cs.dle, cs.ack1])))
    inject(h, "b", block)
    inject(h, "a", ack)
    h.run_for(5)
    assert len(received(h, "b")) == 5 and not h["b"].duplicates
    assert h["a"].machine.counters["auth_failures"] == h["b"].machine.counters["auth_failures"] == 1
    h.send("a", make_images("AA", "BB", 3, first_msg_id=10))
    assert h.run(60)
    h.result().check()


# --- known answers (the examples of docs/PROTOCOL.md) ---------------------------------------------
DOC_SECRET = b"correct horse battery staple"
NA, NB = bytes(range(16)), bytes(range(0x10, 0x20))


def test_known_answers_of_the_protocol_document():
    hs = Handshake(DOC_SECRET, "AA", "BB", NA, NB)
    assert hs.proof(INITIATOR).hex() == "27a5031d0420f429c60aef7cbff0778a"  # BSC: no bodies, version 1
    s_body = b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=128 SESSION=0000abcd AUTH=000102030405060708090a0b0c0d0e0f"
    t_body = b"MCCS/1 HOST=BB WINDOW=8 MAXMSG=128 SESSION=0000abcd AUTH=101112131415161718191a1b1c1d1e1f"
    v_body = b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=128 SESSION=0000abcd"
    assert [hashlib.sha256(b).hexdigest()[:16] for b in (s_body, t_body, v_body)] == [
        "6fda03d6d9c0aab4", "1abc20c97b26f35a", "17a61030a4472849"]
    assert hs.covering(s_body, t_body).proof(RESPONDER).hex() == "66212ca8b354706305bdd8939673ee32"
    assert hs.covering(s_body, t_body, v_body).proof(INITIATOR).hex() == "718d05dd0189ff660e89562fc0eb72bf"
    keys = hs.frames("AA")
    assert keys.tx_key.hex() == "00f4484226396e4b07efa647041bdee9e547d3180c50f74b38d25f4d838a36c3"
    assert keys.rx_key.hex() == "ce720dfc230b188cf74f97f085c33ef40071cca4cb0d029d62d7a49fbe5fefba"
    # async: S, T, V, then AA's first D and BB's A
    drawn_by_a = iter([bytes.fromhex("0000abcd"), NA])  # its SESSION, then its nonce
    a, b = (AsyncLine("AA", "BB", secret=DOC_SECRET, selective_repeat=False,  # the bytes of the document
                      random_bytes=lambda n: next(drawn_by_a)),
            AsyncLine("BB", "AA", secret=DOC_SECRET, selective_repeat=False, random_bytes=lambda n: NB))
    a.start(0.0)
    s = a.data_to_send()
    assert s == b"\x7eS\x00\x00" + s_body + b"\xfd\x92\x7e"
    b.receive_data(s, 0.0)
    t = b.data_to_send()
    assert t == b"\x7eT\x00\x00" + t_body + b" PROOF=66212ca8b354706305bdd8939673ee32\xf1\x55\x7e"
    a.receive_data(t, 0.0)
    v = a.data_to_send()
    assert v == b"\x7eV\x00\x00" + v_body + b" PROOF=718d05dd0189ff660e89562fc0eb72bf\xa1\x8d\x7e"
    b.receive_data(v, 0.0)
    img = encode("BBQ", "AAP", 1, 0, b"hi")
    a.send(img)
    d = a.data_to_send()
    assert d.hex(" ") == ("7e 44 00 00 42 42 51 20 20 20 41 41 50 20 20 20 00 01 00 00 00 02 68 69"
                          " 00 01 83 15 ee f1 df 4c ef 12 e5 b4 7e")
    b.receive_data(d, 0.0)
    assert [e.image for e in b.events() if isinstance(e, MessageReceived)] == [img]
    b.confirm()
    assert b.data_to_send().hex(" ") == "7e 41 00 01 00 01 1e 95 bd e0 91 04 18 d8 b3 55 7e"
    # BSC, ASCII: ID ENQ, ID ACK0, proof block, ACK1, then AA's EOT
    a = BscLine("AA", "BB", code="ascii", secret=DOC_SECRET, random_bytes=lambda n: NA)  # the nonces of the document
    b = BscLine("BB", "AA", role="secondary", code="ascii", secret=DOC_SECRET, random_bytes=lambda n: NB)
    a.start(0.0)
    expect = [("a", "16 16 4d 43 43 53 41 41 2b 05 ff"),
              ("b", "16 16 " + b"MCCSBB+101112131415161718191A1B1C1D1E1FCABD".hex(" ") + " 10 30 ff"),
              ("a", "16 16 10 02 41 55 54 48 " + NA.hex(" ") + " 27 a5 03 1d 04 20 f4 29 c6 0a ef 7c bf f0 77 8a"
                    " 00 01 17 20 ee f0 ff 0b c5 b8 10 03 e9 a7 ff"),
              ("b", "16 16 10 31 00 01 02 a8 39 c0 ff da 78 b1 69 63 ff"),
              ("a", "16 16 04 00 02 9a 52 15 8a ad 58 b7 6d 7a fe ff")]
    for side, wire in expect:
        sender, receiver = (a, b) if side == "a" else (b, a)
        out = sender.data_to_send()
        assert out.hex(" ") == wire, side
        receiver.receive_data(out, 0.0)
    assert [type(e) for e in a.events() + b.events() if isinstance(e, LineUp)] == [LineUp, LineUp]


# --- anything on the line --------------------------------------------------------------------------
@pytest.mark.parametrize("proto", ["async", "bsc"])
def test_authenticated_machines_take_any_bytes_and_deliver_nothing_unproven(proto):
    rng, cs = random.Random(11), CODE_SETS["ebcdic"]
    for trial in range(40):
        h = Harness(*machines(proto), start=rng.choice([("a",), ("b",), ("a", "b")]))
        h.run_for(rng.uniform(0, 3))
        for _ in range(20):
            side = rng.choice("ab")
            junk = rng.randbytes(rng.randint(0, 80))
            forged = forged_async(rng) if proto == "async" else forged_bsc(rng, cs)
            inject(h, side, rng.choice([junk, forged, junk + forged, forged[:rng.randint(0, len(forged))]]))
            h.run_for(rng.uniform(0, 1))
        assert not received(h, "a") and not received(h, "b"), trial
        assert h["a"].machine.counters.get("internal_errors", 0) == 0
