"""Byte-exact known answers for BscLine in both code sets (docs/DESIGN.md 4.2), checked against
the control-character table and an independent bit-by-bit CRC-16."""
import pytest

from linedrivers import BscLine, FrameTraced, LineDown, MessageReceived
from linedrivers.crc import crc16
from linedrivers.image import encode

pytestmark = pytest.mark.timeout(30)

# The table of docs/DESIGN.md 4.2, written out again here on purpose.
TABLE = {
    "ebcdic": dict(SYN=0x32, STX=0x02, ETB=0x26, ETX=0x03, EOT=0x37, ENQ=0x2D, NAK=0x3D, DLE=0x10,
                   ACK0=b"\x10\x70", ACK1=b"\x10\x61", WACK=b"\x10\x6b", RVI=b"\x10\x7c", ID=b"\xd4\xc3\xc3\xe2"),
    "ascii": dict(SYN=0x16, STX=0x02, ETB=0x17, ETX=0x03, EOT=0x04, ENQ=0x05, NAK=0x15, DLE=0x10,
                  ACK0=b"\x10\x30", ACK1=b"\x10\x31", WACK=b"\x10\x3b", RVI=b"\x10\x3c", ID=b"MCCS"),
}
HOSTS = {"ebcdic": {"AA": b"\xc1\xc1", "BB": b"\xc2\xc2", "ZZ": b"\xe9\xe9"},
         "ascii": {"AA": b"AA", "BB": b"BB", "ZZ": b"ZZ"}}
CODES = ["ebcdic", "ascii"]


def bitwise_crc16(data: bytes) -> int:
    """CRC-16 (x^16+x^15+x^2+1) reflected, initial 0: the textbook shift loop."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def wire(code, *parts):
    """SYN SYN, the parts (ints are single characters), the pad."""
    t = TABLE[code]
    out = bytes([t["SYN"], t["SYN"]])
    for p in parts:
        out += bytes([p]) if isinstance(p, int) else p
    return out + b"\xff"


def ident(code, host):
    return TABLE[code]["ID"] + HOSTS[code][host]


def kinds(events, direction):
    return [e.kind for e in events if isinstance(e, FrameTraced) and e.dir == direction]


def signed_on_receiver(code):
    """BB's machine after AA's sign-on: it answered ID ACK0 and got EOT (contention)."""
    t = TABLE[code]
    m = BscLine("BB", "AA", role="secondary", code=code)
    m.receive_data(wire(code, ident(code, "AA"), t["ENQ"]), 0.0)
    assert m.data_to_send() == wire(code, ident(code, "BB"), t["ACK0"])
    m.receive_data(wire(code, t["EOT"]), 0.1)
    m.events()
    return m


IMAGE = encode("BBQ", "AAP", 0x1003, 7, b"x\x10y\x03z\x32\x16\x26\x17\x10\x10")


def block(code, text, end):
    """The expected transparent block, built by hand from the table."""
    t = TABLE[code]
    body = text.replace(b"\x10", b"\x10\x10")
    bcc = bitwise_crc16(text + bytes([t[end]]))
    return wire(code, t["DLE"], t["STX"], body, t["DLE"], t[end], bytes([bcc & 0xFF, bcc >> 8]))


def test_bcc_check_value():
    assert crc16(b"123456789") == 0xBB3D == bitwise_crc16(b"123456789")


@pytest.mark.parametrize("code", CODES)
def test_id_exchange_and_bid(code):
    t = TABLE[code]
    a = BscLine("AA", "BB", code=code)
    a.start(0.0)
    assert a.data_to_send() == wire(code, ident(code, "AA"), t["ENQ"])
    a.receive_data(wire(code, ident(code, "BB"), t["ACK0"]), 0.1)
    assert a.data_to_send() == wire(code, t["EOT"])  # signed on, nothing to send: line back
    a.send(IMAGE)
    assert a.next_deadline() <= 0.1
    a.handle_timeout(0.2)
    assert a.data_to_send() == wire(code, t["ENQ"])
    a.receive_data(wire(code, t["ACK0"]), 0.3)
    assert a.data_to_send() == block(code, IMAGE, "ETX")
    a.receive_data(wire(code, t["ACK1"]), 0.5)
    assert a.data_to_send() == b""  # holds the line for more
    a.handle_timeout(a.next_deadline())
    assert a.data_to_send() == wire(code, t["STX"], t["ENQ"])  # TTD: nothing ready in time
    a.receive_data(wire(code, t["NAK"]), 2.6)
    assert a.data_to_send() == wire(code, t["EOT"])
    assert kinds(a.events(), "tx") == ["ID", "EOT", "ENQ", "ETX", "TTD", "EOT"]


@pytest.mark.parametrize("code", CODES)
def test_id_nak_for_a_stranger(code):
    t = TABLE[code]
    m = BscLine("BB", "AA", code=code)
    bid = wire(code, ident(code, "ZZ"), t["ENQ"])
    m.receive_data(bid, 0.0)
    assert m.data_to_send() == b""  # once may be line noise (IDs have no BCC)
    m.receive_data(bid, 3.0)
    assert m.data_to_send() == wire(code, ident(code, "BB"), t["NAK"])
    z = BscLine("ZZ", "BB", code=code)
    z.start(0.0)
    z.receive_data(wire(code, ident(code, "BB"), t["NAK"]), 0.1)
    downs = [e for e in z.events() if isinstance(e, LineDown)]
    assert [d.reason for d in downs] == ["refused"]


@pytest.mark.parametrize("code", CODES)
def test_block_with_dle_etx_syn_in_text_and_its_replies(code):
    t = TABLE[code]
    m = signed_on_receiver(code)
    m.receive_data(wire(code, t["ENQ"]), 1.0)
    assert m.data_to_send() == wire(code, t["ACK0"])
    m.receive_data(block(code, IMAGE, "ETX"), 1.2)
    assert m.data_to_send() == b""  # not durable yet
    got = [e.image for e in m.events() if isinstance(e, MessageReceived)]
    assert got == [IMAGE]
    m.confirm()
    assert m.data_to_send() == wire(code, t["ACK1"])
    # a repeated ENQ repeats the reply; a bad BCC is NAKed; TTD is NAKed
    m.receive_data(wire(code, t["ENQ"]), 1.5)
    assert m.data_to_send() == wire(code, t["ACK1"])
    bad = bytearray(block(code, IMAGE[:-1] + b"Q", "ETX"))
    bad[-2] ^= 0x01
    m.receive_data(bytes(bad), 1.6)
    assert m.data_to_send() == wire(code, t["NAK"])
    assert m.counters["crc_errors"] == 1
    m.receive_data(wire(code, t["STX"], t["ENQ"]), 1.7)
    assert m.data_to_send() == wire(code, t["NAK"])



@pytest.mark.parametrize("code", CODES)
def test_bytes_wanted_guesses_a_block_as_long_as_the_last_less_the_read_early_bytes(code):
    """A block's length shows only at its end: inside one, bytes_wanted() takes it to be as long
    as the last (so the daemon's port reads it at once, not every few bytes), less READ_EARLY's
    worth of bytes (they come at once; a late read would delay the ACK); elsewhere 1."""
    from linedrivers.bsc_line import READ_EARLY
    t = TABLE[code]
    m = signed_on_receiver(code)
    m.baud = 9600
    early = int(9600 / 10 * READ_EARLY)
    assert m.bytes_wanted() == 1
    m.receive_data(wire(code, t["ENQ"]), 1.0)
    first = block(code, IMAGE, "ETX")
    m.receive_data(first[:10], 1.1)
    assert m.bytes_wanted() == 1  # no block seen yet: nothing to go by
    m.receive_data(first[10:], 1.2)
    assert m.bytes_wanted() == 1  # between blocks
    m.events()
    m.confirm()
    m.data_to_send()
    m.receive_data(wire(code, t["ENQ"]), 1.3)
    m.data_to_send()
    nxt = block(code, IMAGE[:-1] + b"Q", "ETX")
    m.receive_data(nxt[:12], 1.4)
    assert m.bytes_wanted() == len(first) - 1 - 12 - early  # the last block, without its pad
    m.receive_data(nxt[12:], 1.5)
    assert [e.image[-1:] for e in m.events() if isinstance(e, MessageReceived)] == [b"Q"]
    assert m.bytes_wanted() == 1


@pytest.mark.parametrize("code", CODES)
def test_wack_when_busy(code):
    t = TABLE[code]
    m = signed_on_receiver(code)
    m.set_busy(True)
    m.receive_data(wire(code, t["ENQ"]), 1.0)
    assert m.data_to_send() == wire(code, t["WACK"])  # a bid answered WACK: not now
    m.set_busy(False)
    m.receive_data(wire(code, t["ENQ"]), 2.0)
    assert m.data_to_send() == wire(code, t["ACK0"])
    m.set_busy(True)
    m.receive_data(block(code, IMAGE, "ETX"), 2.2)
    m.confirm()
    assert m.data_to_send() == wire(code, t["WACK"])  # stored, send nothing more
    m.receive_data(wire(code, t["ENQ"]), 3.0)
    assert m.data_to_send() == wire(code, t["WACK"])
    m.set_busy(False)
    m.receive_data(wire(code, t["ENQ"]), 4.0)
    assert m.data_to_send() == wire(code, t["ACK1"])


@pytest.mark.parametrize("code", CODES)
def test_rvi_eot_and_sign_off(code, monkeypatch):
    from linedrivers import bsc_receiver
    monkeypatch.setattr(bsc_receiver, "RVI_AFTER", 1)
    t = TABLE[code]
    m = signed_on_receiver(code)
    m.send(encode("AAQ", "BBP", 1, 0, b"mine"))  # BB has a message of its own
    m.receive_data(wire(code, t["ENQ"]), 1.0)
    m.data_to_send()
    m.receive_data(block(code, IMAGE, "ETX"), 1.2)
    m.confirm()
    assert m.data_to_send() == wire(code, t["RVI"])
    m.receive_data(wire(code, t["EOT"]), 1.3)  # contention again, and BB has a message: it bids
    assert m.data_to_send() == wire(code, t["ENQ"])
    m.stop(2.0)
    assert m.data_to_send() == wire(code, t["DLE"], t["EOT"])
    downs = [e for e in m.events() if isinstance(e, LineDown)]
    assert downs[0].reason == "stopped" and len(downs[0].unacked) == 1


@pytest.mark.parametrize("code", CODES)
def test_multi_block_message(code):
    t = TABLE[code]
    image = encode("AAQ", "BBP", 9, 0, bytes(range(256)) * 2)
    a = BscLine("AA", "BB", code=code, block_size=200, max_message=600)
    a.start(0.0)
    a.data_to_send()
    a.receive_data(wire(code, ident(code, "BB"), t["ACK0"]), 0.1)
    a.data_to_send()
    a.send(image)
    a.handle_timeout(0.2)
    assert a.data_to_send() == wire(code, t["ENQ"])
    a.receive_data(wire(code, t["ACK0"]), 0.3)
    assert a.data_to_send() == block(code, image[:200], "ETB")
    a.receive_data(wire(code, t["ACK1"]), 0.4)
    assert a.data_to_send() == block(code, image[200:400], "ETB")
    a.receive_data(wire(code, t["ACK0"]), 0.5)
    assert a.data_to_send() == block(code, image[400:], "ETX")
