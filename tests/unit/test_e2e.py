"""End-to-end protection (mccs.core.e2e, docs/E2E.md): the construction, and hosts in memory."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from checkpoint.changes import Table
from mccs.core import e2e, envelope
from mccs.core.e2e import Header, Keyring, Mode, Refused
from mccs.core.lines import LineState
from mccs.core.lists import BlockState
from mccs.core.routing import INFINITY
from mccs.testbed.hostsim import SimNet, line

A_PRIV, D_PRIV = bytes(range(1, 33)), bytes(range(33, 65))
HEADER = Header("DDRECV", "AASEND", 513, 7, 3, envelope.RECEIPT, "0a0b0c0d", 42)


def _rings(a: bytes = A_PRIV, d: bytes = D_PRIV) -> tuple[Keyring, Keyring]:
    ka, kd = X25519PrivateKey.from_private_bytes(a), X25519PrivateKey.from_private_bytes(d)
    return (Keyring("AA", [ka], {"DD": [e2e.public_bytes(kd)]}),
            Keyring("DD", [kd], {"AA": [e2e.public_bytes(ka)]}))


def test_the_construction_is_hkdf_hmac_and_chacha20_as_documented_and_its_bytes_are_pinned():
    """docs/E2E.md's byte example, computed here step by step from the primitives."""
    ka, kd = X25519PrivateKey.from_private_bytes(A_PRIV), X25519PrivateKey.from_private_bytes(D_PRIV)
    apub, dpub = e2e.public_bytes(ka), e2e.public_bytes(kd)
    okm = HKDF(hashes.SHA256(), 64, salt=b"MCCS E2E1", info=b"MCCS E2E1 AA>DD" + apub + dpub).derive(
        ka.exchange(kd.public_key()))
    ad = (b"MCCS E2E1" + bytes([2]) + b"DDRECV" + b"AASEND" + (513).to_bytes(2, "big") + (7).to_bytes(2, "big")
          + bytes([3, envelope.RECEIPT]) + bytes.fromhex("0a0b0c0d") + (42).to_bytes(4, "big")
          + (600).to_bytes(4, "big"))
    text = b"pay 10 to BB"
    tag = hmac.new(okm[:32], ad + text, hashlib.sha256).digest()[:16]
    sealed = Cipher(algorithms.ChaCha20(okm[32:], b"\0" * 4 + tag[:12]), None).encryptor().update(text)
    ring_a, ring_d = _rings()
    out, trailer = e2e.protect(ring_a, Mode.SEALED, HEADER, 600, text)
    hints = bytes([e2e.key_hint(apub), e2e.key_hint(dpub)])
    assert (out, trailer) == (sealed, bytes([2]) + hints + (600).to_bytes(4, "big") + tag)
    assert len(trailer) == envelope.E2E_SIZE == 23  # the budget: at most 24 bytes a message
    assert trailer.hex() == "02" + "%02x%02x" % (e2e.key_hint(apub), e2e.key_hint(dpub)) + "00000258" + tag.hex()
    assert (apub.hex(), out.hex(), tag.hex()) == (  # the example in docs/E2E.md: a change to the construction shows
        "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c", "8b966ebb47b2ab5c40c71d24",
        "3f7e38d263fe0f0e58e5d605343cbdb2")
    assert e2e.open_(ring_d, HEADER, 550, out, trailer) == (text, Mode.SEALED)


@pytest.mark.parametrize("mode", [Mode.SIGNED, Mode.SEALED])
def test_every_covered_field_the_text_and_a_raised_ttl_are_refused(mode):
    ring_a, ring_d = _rings()
    out, trailer = e2e.protect(ring_a, mode, HEADER, 600, b"hello")
    assert (out == b"hello") is (mode is Mode.SIGNED)
    assert e2e.open_(ring_d, HEADER, 600, out, trailer) == (b"hello", mode)
    changes = {"to_id": "DDOTHR", "from_id": "AAEVIL", "msg_id": 514, "user_id": 8, "priority": 7,
               "flags": envelope.NOTICE, "epoch": "0a0b0c0e", "pseq": 41}
    for name, value in changes.items():
        with pytest.raises(Refused) as e:
            e2e.open_(ring_d, dataclasses.replace(HEADER, **{name: value}), 600, out, trailer)
        assert e.value.code in ("bad_tag", "untrusted"), name
    flipped = bytes([out[0] ^ 1]) + out[1:]
    with pytest.raises(Refused, match="does not verify"):
        e2e.open_(ring_d, HEADER, 600, flipped, trailer)
    with pytest.raises(Refused, match="does not verify"):  # TTL0 itself is covered
        e2e.open_(ring_d, HEADER, 600, out, trailer[:3] + (6000).to_bytes(4, "big") + trailer[7:])
    assert e2e.open_(ring_d, HEADER, 602, out, trailer, hops=2)[0] == b"hello"  # rounding up, a tenth a hop
    for ttl in (602, 0):  # more time than it left with, or none at all
        with pytest.raises(Refused) as e:
            e2e.open_(ring_d, HEADER, ttl, out, trailer)
        assert e.value.code == "ttl_raised"


def test_keys_the_destination_does_not_trust_or_no_longer_has_are_refused_and_a_retired_key_still_opens():
    ring_a, ring_d = _rings()
    out, trailer = e2e.protect(ring_a, Mode.SEALED, HEADER, 0, b"x")
    stranger = Keyring("DD", ring_d.own, {})
    with pytest.raises(Refused) as e:
        e2e.open_(stranger, HEADER, 0, out, trailer)
    assert e.value.code == "untrusted"
    rotated = Keyring("DD", [X25519PrivateKey.generate(), *ring_d.own], ring_d.trusted)  # old key kept
    assert e2e.open_(rotated, HEADER, 0, out, trailer)[0] == b"x"
    forgot = Keyring("DD", [X25519PrivateKey.generate()], ring_d.trusted)
    with pytest.raises(Refused) as e:
        e2e.open_(forgot, HEADER, 0, out, trailer)
    assert e.value.code == "old_key"
    with pytest.raises(Refused) as e:
        e2e.protect(Keyring("AA", ring_a.own, {}), Mode.SIGNED, HEADER, 0, b"x")
    assert e.value.code == "untrusted"


def test_a_new_key_whose_hint_is_the_old_one_s_too_still_lets_the_old_one_open_what_it_was_made_for():
    """The hint is one byte: 1 in 256 rotated keys shares its predecessor's (a test once met one)."""
    ring_a, ring_d = _rings()
    old_hint = e2e.key_hint(e2e.public_bytes(ring_d.own[0]))
    clash = next(k for k in iter(X25519PrivateKey.generate, None) if e2e.key_hint(e2e.public_bytes(k)) == old_hint)
    rotated = Keyring("DD", [clash, *ring_d.own], ring_d.trusted)
    for mode in Mode.SIGNED, Mode.SEALED:
        out, trailer = e2e.protect(ring_a, mode, HEADER, 0, b"made for the old key")
        assert e2e.open_(rotated, HEADER, 0, out, trailer) == (b"made for the old key", mode)
    text, pending = e2e.seal_whole_text(ring_a, Mode.SEALED, HEADER, b"in segments" * 10)
    trailer = e2e.protect_segments(ring_a, pending, HEADER, 0)
    check = e2e.check_segments(rotated, HEADER, 0, trailer)
    check.update(text)
    assert check.ok() and e2e.opening(rotated, HEADER, trailer) == (check.cipher_key, trailer[:16])


def test_the_envelope_carries_the_trailer_under_its_own_mark_and_a_short_one_is_a_bad_image():
    trailer = bytes(range(23))
    img = envelope.wrap("DDRECV", "AASEND", 1, 2, b"text", envelope.Envelope(pseq=5, epoch="01020304", e2e=trailer))
    assert img[-envelope.SIZE:][:1] == b"E" and img[-envelope.SIZE - 23:-envelope.SIZE] == trailer
    m, env = envelope.unwrap(img, 128)
    assert (m.data, env.e2e, env.pseq) == (b"text", trailer, 5)
    plain = envelope.wrap("DDRECV", "AASEND", 1, 2, b"text", envelope.Envelope(pseq=5))
    assert envelope.unwrap(plain, 128)[1].e2e == b""
    from linedrivers import image
    short = image.encode("DDRECV", "AASEND", 1, 2, b"abc" + b"E" + plain[-envelope.SIZE + 1:])  # 3 bytes, not 23
    with pytest.raises(image.ImageError, match="end-to-end trailer"):
        envelope.unwrap(short, 128)


# -- hosts in memory ---------------------------------------------------------------------------
def _chain(tmp_path, mode: str = "seal", **keys) -> SimNet:
    """AA - BB - CC; AA and CC have keys and trust each other, BB (transit) has none."""
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA"), line("CC")], "CC": [line("BB")]}, e2e=mode,
                 **keys)
    net.hosts["BB"].cfg.e2e = "off"
    net["BB"].kernel.lines.e2e_mode = Mode.NONE
    ka, kc = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    net["AA"].keys.update(Keyring("AA", [ka], {"CC": [e2e.public_bytes(kc)]}))
    net["CC"].keys.update(Keyring("CC", [kc], {"AA": [e2e.public_bytes(ka)]}))
    _converged(net)
    return net


def _converged(net: SimNet) -> None:
    assert net.run(lambda: all(h.kernel.routes.best.get(o) and h.kernel.routes.best[o].dist < INFINITY
                               for h in net.hosts.values() for o in net.hosts if o != h.id), duration=30)


def _texts(client, n: int) -> list[dict]:
    got = []
    for _ in range(n):
        msg = client.recv(timeout=30)["msg"]
        assert msg is not None, f"only {len(got)} of {n} came"
        got.append(msg)
    return got


@pytest.mark.parametrize("mode", ["sign", "seal"])
def test_a_transit_host_carries_protected_messages_it_cannot_read_and_the_destination_says_how_they_came(
        tmp_path, mode):
    net = _chain(tmp_path, mode)
    net.channel("BB", "CC").disconnect()  # they wait at BB, in its checkpoint
    src = net.client("AA", "S")
    for i in range(5):
        src.send("CCR", b"secret %d" % i)
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"] == 5, duration=30)
    rows = net["BB"].cp.conn.execute(f"SELECT data, seal FROM {Table.SEND_LIST}").fetchall()
    assert len(rows) == 5 and all(len(seal) == 23 for _, seal in rows)
    assert any(b"secret" in data for data, _ in rows) is (mode == "sign")
    net.channel("BB", "CC").reconnect()
    got = _texts(net.client("CC", "R"), 5)
    assert [base64.b64decode(m["data"]) for m in got] == [b"secret %d" % i for i in range(5)]
    assert {m["e2e"] for m in got} == {"signed" if mode == "sign" else "sealed"}
    assert net["CC"].kernel.counters["refused"] == 0


def _waiting_at_bb(tmp_path, n: int):
    """The chain, BB-CC cut, and n messages m0... from AA for CC stored at BB: (net, AA's client, MSG_IDs)."""
    net = _chain(tmp_path)
    net.channel("BB", "CC").disconnect()
    src = net.client("AA", "S")
    ids = [src.send("CCR", b"m%d" % i)["msg_id"] for i in range(n)]
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"] == n, duration=30)
    return net, src, ids


def _told(src, msg_id: int, reason: str) -> dict:
    """The undeliverable notice CC's daemon sent AA about msg_id, with that reason (its message)."""
    notice = src.recv(from_id="CCMCCS", timeout=30)["msg"]
    body = json.loads(base64.b64decode(notice["data"]))
    assert (body["notice"], body["msg_id"], body["reason"]) == ("undeliverable", msg_id, reason)
    return notice


def test_a_message_altered_at_the_transit_host_is_refused_its_origin_told_and_the_stream_goes_on_after_the_wait(
        tmp_path):
    """With the default e2e_gap_wait: the stream behind waits 10 minutes (simulated), then goes on."""
    net, src, ids = _waiting_at_bb(tmp_path, 4)
    victim = next(b for b in net["BB"].kernel.lists.send if b.msg_id == ids[1])
    victim.data = bytes([victim.data[0] ^ 0x20]) + bytes(victim.data[1:])  # a hostile transit host's change
    net.channel("BB", "CC").reconnect()
    dst = net.client("CC", "R")
    assert base64.b64decode(_texts(dst, 1)[0]["data"]) == b"m0"
    assert net.run(lambda: net["CC"].kernel.counters["refused_bad_tag"] == 1, duration=30)
    notice = _told(src, ids[1], "refused")
    assert notice["e2e"] == "sealed"  # CC's daemon sealed its notice too
    net.run(duration=300)
    assert dst.recv(wait=False)["msg"] is None  # m2 and m3 wait for the genuine m1
    net.run(duration=400)
    assert [base64.b64decode(m["data"]) for m in _texts(dst, 2)] == [b"m2", b"m3"]  # after e2e_gap_wait
    refused = [t for t in net["CC"].traces if t.kind == "refused"]
    assert len(refused) == 1 and refused[0].fields["reason"] == "bad_tag"


def test_a_void_forged_by_the_transit_host_passes_its_place_and_its_origin_is_told(tmp_path):
    """A void carries no protection: a transit host may make one of any message it holds. It cannot
    make that loss silent: in a protected stream a void that owes no notice makes one anyway."""
    net, src, ids = _waiting_at_bb(tmp_path, 3)
    victim = next(b for b in net["BB"].kernel.lists.send if b.msg_id == ids[1])
    victim.data, victim.seal, victim.flags = b"", b"", envelope.VOID  # "expired on the way", owing nothing
    net.channel("BB", "CC").reconnect()
    dst = net.client("CC", "R")
    assert [base64.b64decode(m["data"]) for m in _texts(dst, 2)] == [b"m0", b"m2"]
    _told(src, ids[1], "voided")
    assert net["CC"].kernel.counters["voids_unexplained"] == 1


def test_a_forged_message_is_refused_and_the_genuine_one_with_its_numbers_is_still_delivered(tmp_path):
    net = _chain(tmp_path, e2e_gap_wait=30.0)
    net.channel("BB", "CC").disconnect()
    src = net.client("AA", "S")
    src.send("CCR", b"genuine")
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"] == 1, duration=30)
    assert net.run(lambda: net["BB"].kernel.lines["CC"].state is not LineState.UP, duration=60)
    send = net["BB"].kernel.lists.send
    genuine = next(iter(send))
    assert genuine.state is BlockState.QUEUED
    forged = dataclasses.replace(genuine, data=b"forged", seal=b"")
    send.remove(genuine)
    genuine.seq = net["BB"].kernel.seqs.take()
    send.add(forged)  # BB sends its own text under AA's FROM_ID and numbers first, unprotected
    send.add(genuine)
    net.channel("BB", "CC").reconnect()
    got = _texts(net.client("CC", "R"), 1)
    assert base64.b64decode(got[0]["data"]) == b"genuine" and got[0]["e2e"] == "sealed"
    assert net["CC"].kernel.counters["refused_unsigned"] == 1  # it came first, and took no place
    assert net.client("CC", "R").recv(timeout=60)["msg"] is None  # nothing else, not after the gap wait either


def test_accept_from_refuses_others_at_once_and_passes_their_place(tmp_path):
    from mccs.config import ProcessConfig
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]},
                 processes={"BB": [ProcessConfig("PAY", accept_from=["CC", "AAGOOD"])]})
    assert net.run(lambda: net["AA"].kernel.routes.best.get("BB"), duration=30)
    bad, good = net.client("AA", "BAD"), net.client("AA", "GOOD")
    bad.send("BBPAY", b"no")
    good.send("BBPAY", b"yes")
    got = _texts(net.client("BB", "PAY"), 1)
    assert base64.b64decode(got[0]["data"]) == b"yes" and "e2e" not in got[0]  # (on the socket only if protected)
    assert net["BB"].kernel.counters["refused_not_accepted"] == 1
    body = json.loads(base64.b64decode(bad.recv(from_id="BBMCCS", timeout=30)["msg"]["data"]))
    assert body["reason"] == "refused"


def test_a_send_to_a_host_whose_key_is_not_trusted_is_refused_with_e2e_on(tmp_path):
    net = _chain(tmp_path)
    reply = net.client("AA", "S").send("BBR", b"x")
    assert reply["ok"] is False and reply["code"] == "no_key" and "mccs keys trust BB" in reply["error"]


def test_a_frame_s_worth_goes_whole_and_one_byte_more_in_segments_both_sealed(tmp_path):
    net = _chain(tmp_path, max_message=1 << 20)
    src = net.client("AA", "S")
    assert src.send("CCR", b"x" * 8192)["ok"]  # a frame's worth (frame_max) goes whole, protected at each hand
    assert src.send("CCR", b"y" * 8193)["ok"]  # more is sealed as a whole at SEND and goes in segments
    got = _texts(net.client("CC", "R"), 2)
    assert [base64.b64decode(m["data"]) for m in got] == [b"x" * 8192, b"y" * 8193]
    assert {m["e2e"] for m in got} == {"sealed"}
    segments = [t for t in net["CC"].traces if t.type == "frame"]
    assert segments  # (traced frames: the second came in pieces)


def test_a_replay_of_an_epoch_its_origin_left_is_refused_once_a_protected_message_of_the_new_one_came(tmp_path):
    net = _chain(tmp_path)
    src, dst = net.client("AA", "S"), net.client("CC", "R")
    src.send("CCR", b"first")
    assert _texts(dst, 1)[0]["e2e"] == "sealed"
    captured = []
    tap = net["CC"].kernel.receiver.received

    def keep(src_, img, routed, fx, now, wall):
        captured.append((src_, img, routed))
        tap(src_, img, routed, fx, now, wall)
    net["CC"].kernel.receiver.received = keep
    src.send("CCR", b"second")
    assert base64.b64decode(_texts(dst, 1)[0]["data"]) == b"second"
    net["AA"].renew()  # AA's checkpoint started afresh: a new epoch
    _converged(net)
    src = net.client("AA", "S")
    src.send("CCR", b"third")
    assert base64.b64decode(_texts(dst, 1)[0]["data"]) == b"third"
    arrival, img, routed = next(c for c in captured if c[2] and envelope.unwrap(c[1], 128)[1].e2e)  # "second"
    net["CC"].kernel.receiver.received(arrival, img, routed, net["CC"].kernel._fx, net.now, net.now + 1.8e9)
    assert net["CC"].kernel.counters["refused_replay"] == 1
    assert dst.recv(timeout=10)["msg"] is None


# -- messages in segments -----------------------------------------------------------------------
def test_a_message_in_segments_is_sealed_as_a_whole_carried_in_pieces_and_checked_at_its_destination(tmp_path):
    net = _chain(tmp_path, max_message=1 << 20)
    net.channel("BB", "CC").disconnect()
    text = bytes(range(256)) * 800  # 200 KiB: over a frame, so in segments
    src = net.client("AA", "S")
    assert src.send("CCR", text)["ok"]
    stored_at_aa = net["AA"].cp.conn.execute("SELECT seal FROM send_list").fetchone()[0]
    assert len(stored_at_aa) == e2e.PENDING_SIZE  # the origin keeps MODE and SIV; its text is stored sealed
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"] == 1, duration=120)
    blk = next(iter(net["BB"].kernel.lists.send))
    held = net["BB"].cp.read_blob(blk.data, 0, blk.size)
    assert len(held) == len(text) and bytes(range(256)) not in held and len(blk.seal) == envelope.LARGE_SIZE
    net.channel("BB", "CC").reconnect()
    got = _texts(net.client("CC", "R"), 1)
    assert base64.b64decode(got[0]["data"]) == text and got[0]["e2e"] == "sealed"
    assert net["CC"].kernel.counters["refused"] == 0


def test_a_text_in_segments_changed_at_the_transit_host_with_its_crc_made_to_match_is_refused(tmp_path):
    import zlib
    net = _chain(tmp_path, max_message=1 << 20, e2e_gap_wait=20.0)
    net.channel("BB", "CC").disconnect()
    src = net.client("AA", "S")
    src.send("CCR", b"a" * 100_000)
    src.send("CCR", b"after")
    assert net.run(lambda: net["BB"].kernel.counters["forwarded"] == 2, duration=120)
    assert net.run(lambda: net["BB"].kernel.lines["CC"].state is not LineState.UP, duration=60)  # (it starts again)
    blk = next(b for b in net["BB"].kernel.lists.send if b.size == 100_000)
    text = bytearray(net["BB"].cp.read_blob(blk.data, 0, blk.size))
    text[50_000] ^= 1
    net["BB"].cp.conn.execute("DELETE FROM text_pieces WHERE text = ?", (blk.data.rowid,))
    net["BB"].cp.conn.execute("INSERT INTO text_pieces (text, off, data) VALUES (?, 0, ?)",
                              (blk.data.rowid, bytes(text)))
    blk.crc = zlib.crc32(text)  # a hostile host announces the CRC of what it sends
    blk.data = dataclasses.replace(blk.data, crc=blk.crc)
    net.channel("BB", "CC").reconnect()
    dst = net.client("CC", "R")
    assert base64.b64decode(_texts(dst, 1)[0]["data"]) == b"after"  # after the gap wait
    assert net["CC"].kernel.counters["refused_bad_tag"] == 1
    assert not net["CC"].cp.conn.execute("SELECT count(*) FROM recv_list").fetchone()[0]


def test_a_destination_that_crashes_while_it_checks_a_text_checks_it_again_and_delivers_it_once(tmp_path):
    from mccs.core.receiver import UNCHECKED
    net = _chain(tmp_path, max_message=1 << 20)
    text = bytes(range(251)) * 2000  # 502,000 bytes: checked 64 KiB a pass
    net.client("AA", "S").send("CCR", text)

    def unchecked() -> bool:
        rows = net["CC"].cp.conn.execute("SELECT flags FROM recv_list").fetchall()
        return any(flags & UNCHECKED for flags, in rows)
    assert net.run(unchecked, duration=120)
    net["CC"].crash()  # kill -9: the message is stored, its check not done
    assert [c.check for c in net["CC"].kernel.receiver.checking.values()] == [None]  # checked again from its start
    dst = net.client("CC", "R")
    got = _texts(dst, 1)
    assert base64.b64decode(got[0]["data"]) == text and got[0]["e2e"] == "sealed"
    assert dst.recv(timeout=10)["msg"] is None


def test_a_protected_message_waits_for_a_line_that_carries_it_and_an_older_transit_host_still_carries_the_rest(
        tmp_path, monkeypatch):
    """BB offers no E2E1 (an MCCS from before it): AA's sealed message for CC waits at AA
    (`e2e_held`) and is given up after too_large_wait; unprotected traffic goes on."""
    from mccs.core import machine
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA"), line("CC")], "CC": [line("BB")]}, e2e="seal")
    net["BB"].cfg.e2e = "off"
    with monkeypatch.context() as m:
        m.setattr(machine, "FEATURES", tuple(f for f in machine.FEATURES if f != e2e.FEATURE))
        net["BB"].crash()  # (made again: its machines without E2E1, no e2e of its own)
    ka, kc = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    net["AA"].keys.update(Keyring("AA", [ka], {"CC": [e2e.public_bytes(kc)]}))
    net["CC"].keys.update(Keyring("CC", [kc], {"AA": [e2e.public_bytes(ka)]}))
    _converged(net)
    assert e2e.FEATURE not in net["AA"].kernel.lines["BB"].features
    src = net.client("AA", "S")
    msg_id = src.send("CCR", b"sealed behind an older host")["msg_id"]
    assert net.run(lambda: net["AA"].kernel.lines["BB"].counters["e2e_held"], duration=30)
    assert net.client("BB", "S").send("AAR", b"still heard")["ok"]  # unprotected, from a host AA has no key of
    assert base64.b64decode(_texts(net.client("AA", "R"), 1)[0]["data"]) == b"still heard"
    assert net.client("CC", "R").recv(timeout=5)["msg"] is None
    net.run(duration=310)  # too_large_wait (300 s): given up, it goes on as a void (no text to protect)
    assert net.run(lambda: net["CC"].kernel.counters["voids"] == 1, duration=60)  # its place passed at CC
    assert not any(b.msg_id == msg_id for b in net["AA"].kernel.lists.send)
    # CC's undeliverable notice for it is sealed, so it cannot cross BB either (docs/E2E.md, limits)
    assert net["CC"].kernel.lines["BB"].counters["e2e_held"] >= 1
    # and is given up in its turn, though custody's probes from CC are held on that line by turns with it
    assert net.run(lambda: net["CC"].kernel.lines["BB"].counters["too_large_returned"], duration=400)
