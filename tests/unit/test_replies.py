"""The replies on the process socket (mccs.core.replies) are typed values; what they put on the
wire is pinned here byte for byte (keys, their order, values), as docs/SOCKET.md and the clients
read them. A change here is a change of the protocol."""
from __future__ import annotations

import json
import typing

import pytest

from checkpoint.changes import Stored
from mccs.client.ipc import frame
from mccs.core import replies
from mccs.core.effects import Effects, Reply
from mccs.core.replies import (NOTHING, Accepted, AcceptedMany, Alive, AtHost, CallAnswer, Cancelled, CodecSwitched,
                               Confirmed, Failed, Message, NoAnswer, Observing, PingAnswer, QueueEntry, QueueList,
                               QueuePurge, Received, Refused, StatusReport, Welcome)
from mccs.core.requests import CODECS, Code, RequestError

pytestmark = pytest.mark.timeout(30)

LARGE = Stored(5, 70_000, 0x1234)


def _msg(**keys) -> Message:
    return Message(**{"rid": 88, "from_id": "BBLEDG", "to_id": "AAPAY ", "msg_id": 4, "user_id": 4,
                      "data": b"ok", **keys})


#: Each reply kind (several shapes of some) and the JSON it is on the socket, as the daemon sent
#: it before replies were typed (`id` is the request's, put first by effects.Reply).
PINNED = [
    (Refused(Code.BAD_ID, "to: bad"), '{"ok":false,"error":"to: bad","code":"bad_id"}'),
    (Failed(Code.CANCELLED, "the SEND was cancelled"),
     '{"ok":false,"code":"cancelled","error":"the SEND was cancelled"}'),
    (Failed(Code.PURGED, "the SEND was purged by the operator at AA"),
     '{"ok":false,"code":"purged","error":"the SEND was purged by the operator at AA"}'),
    (Welcome("AAPAY ", "AA", 128),
     '{"ok":true,"process":"AAPAY ","host":"AA","max_message":128,"v":4,"codecs":%s}'
     % json.dumps(list(CODECS), separators=(",", ":"))),
    (Observing("AAPAY "), '{"ok":true,"observing":"AAPAY "}'),
    (Accepted(17, "BBLEDG"), '{"ok":true,"msg_id":17,"to":"BBLEDG"}'),
    (AcceptedMany((18, 19)), '{"ok":true,"msg_ids":[18,19]}'),
    (NOTHING, '{"ok":true,"msg":null}'),
    (Received(_msg()),
     '{"ok":true,"msg":{"rid":88,"from_id":"BBLEDG","to_id":"AAPAY ","msg_id":4,"user_id":4,"data":"b2s="}}'),
    (Received(_msg(ttl=2.5, reply=True, ok=False), (_msg(rid=89, ttl=0.0),)),
     '{"ok":true,"msg":{"rid":88,"from_id":"BBLEDG","to_id":"AAPAY ","msg_id":4,"user_id":4,"ttl":2.5,'
     '"reply":true,"ok":false,"data":"b2s="},"more":[{"rid":89,"from_id":"BBLEDG","to_id":"AAPAY ","msg_id":4,'
     '"user_id":4,"ttl":0.0,"data":"b2s="}]}'),
    (Received(_msg(rid=None, reply=True, copy=True)),
     '{"ok":true,"msg":{"from_id":"BBLEDG","to_id":"AAPAY ","msg_id":4,"user_id":4,"reply":true,"ok":true,'
     '"data":"b2s=","copy":true}}'),
    (Received(_msg(data=LARGE)),  # the shell adds its text: "bin" after the object, or "data" (test below)
     '{"ok":true,"msg":{"rid":88,"from_id":"BBLEDG","to_id":"AAPAY ","msg_id":4,"user_id":4}}'),
    (Received(_msg(rid=None, data=LARGE, copy=True)),
     '{"ok":true,"msg":{"from_id":"BBLEDG","to_id":"AAPAY ","msg_id":4,"user_id":4,"copy":true}}'),
    (Confirmed(), '{"ok":true}'),
    (Cancelled(True), '{"ok":true,"cancelled":true}'),
    (Cancelled(False), '{"ok":true,"cancelled":false}'),
    (Cancelled(False, (17, "BBLEDG")), '{"ok":true,"cancelled":false,"msg_id":17,"to":"BBLEDG"}'),
    (Alive("AA"), '{"ok":true,"host":"AA"}'),
    (PingAnswer("BB", "LEDG", True), '{"ok":true,"answer":true,"host":"BB","name":"LEDG","attached":true}'),
    (PingAnswer("BB", "", None), '{"ok":true,"answer":true,"host":"BB","name":"","attached":null}'),
    (NoAnswer("BB"), '{"ok":true,"host":"BB","answer":null}'),
    (StatusReport({"host": "AA", "lists": {"wait": 0}}), '{"ok":true,"status":{"host":"AA","lists":{"wait":0}}}'),
    (CodecSwitched("msgpack"), '{"ok":true,"codec":"msgpack"}'),
    (CallAnswer("BB", {"call": "dialling", "call_since": 0.0}),
     '{"ok":true,"peer":"BB","call":"dialling","call_since":0.0}'),
    (AtHost("AA", QueueList(({"id": "AA/1"},), 2)), '{"host":"AA","ok":true,"entries":[{"id":"AA/1"}],"more":2}'),
    (AtHost("AA", QueueEntry({"id": "AA/1"})), '{"host":"AA","ok":true,"entry":{"id":"AA/1"}}'),
    (AtHost("AA", QueueEntry({"id": "AA/1"}, "")), '{"host":"AA","ok":true,"entry":{"id":"AA/1"},"note":""}'),
    (AtHost("AA", QueuePurge(("AA/1",), ("AA/2",), ({"id": "#3", "why": "handed"},))),
     '{"host":"AA","ok":true,"purged":["AA/1"],"pending":["AA/2"],"skipped":[{"id":"#3","why":"handed"}]}'),
    (AtHost("AA", Refused(Code.NOT_PURGED, "AA/1 is not purged")),
     '{"host":"AA","ok":false,"error":"AA/1 is not purged","code":"not_purged"}'),
]


def _json(obj: dict) -> str:
    return frame(obj, "json")[4:].decode()


@pytest.mark.parametrize("body, wire", PINNED, ids=[f"{type(b).__name__}-{i}" for i, (b, _) in enumerate(PINNED)])
def test_each_reply_kind_is_on_the_wire_exactly_as_before(body, wire):
    assert _json(body.wire()) == wire
    assert _json(Reply(3, 7, body).wire()) == '{"id":7,' + wire[1:]  # the request's id first
    assert json.loads(_json(Reply(3, None, body).wire()))["id"] is None  # a request with no id, or unreadable


def test_every_reply_kind_is_pinned():
    kinds = set(typing.get_args(replies.Body)) | set(typing.get_args(replies.QueueResult))
    pinned = {type(b) for b, _ in PINNED} | {type(b.result) for b, _ in PINNED if isinstance(b, AtHost)}
    assert kinds <= pinned, kinds - pinned


def test_docs_socket_names_every_reply_type_and_every_code():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "SOCKET.md").read_text()
    named = {name for name in dir(replies) if f"| `{name}` |" in text}
    assert named == {k.__name__ for k in typing.get_args(replies.Body)} | {"Message"}
    assert all(f"`{c.value}`" in text for c in Code)


def test_a_refusal_is_made_of_the_request_error_and_codes_go_as_plain_strings_in_both_codecs():
    body = Refused.of(RequestError(Code.TOO_LARGE, "message of 200 bytes is over the maximum of 128"))
    assert body == Refused(Code.TOO_LARGE, "message of 200 bytes is over the maximum of 128")
    assert type(body.wire()["code"]) is Code  # typed in the core ...
    msgpack = pytest.importorskip("msgpack")
    for obj in (Reply(1, 2, body).wire(), Reply(1, 2, Failed(Code.REFUSED, "no free MSG_ID for the ping")).wire()):
        assert json.loads(_json(obj))["code"] == msgpack.unpackb(frame(obj, "msgpack")[4:])["code"] \
            == obj["code"].value  # ... its value on the wire


def test_a_large_text_is_the_reply_s_stored_and_only_a_received_message_has_one():
    assert Reply(1, 2, Received(_msg(data=LARGE))).stored is LARGE
    assert Reply(1, 2, Received(_msg())).stored is None
    assert Reply(1, 2, NOTHING).stored is None
    assert Reply(1, 2, Accepted(17, "BBLEDG")).stored is None


def test_effects_keep_the_typed_reply_for_a_connection_and_none_for_one_gone():
    fx = Effects()
    fx.reply(3, "a", Confirmed())
    fx.reply(None, "b", Confirmed())
    assert fx.replies == [Reply(3, "a", Confirmed())]


def test_the_kernel_s_replies_through_the_simulated_shell_are_the_documented_objects(alone):
    """docs/SOCKET.md's first example, as a client reads it (mccs.testbed.hostsim frames each wire())."""
    p, r = alone.client("AA", None), alone.client("AA", "R")
    hello = p.ask({"op": "hello", "name": "PAY"})
    assert _json(hello) == ('{"id":1,"ok":true,"process":"AAPAY ","host":"AA","max_message":128,"v":4,"codecs":%s}'
                            % json.dumps(list(CODECS), separators=(",", ":")))
    sent = p.ask({"op": "send", "to": "AAR", "data": "aGVsbG8=", "user_id": 9, "req": "5f0c"})
    assert _json(sent) == '{"id":2,"ok":true,"msg_id":1,"to":"AAR   "}'
    got = r.recv(confirm=False)
    assert _json(got) == ('{"id":2,"ok":true,"msg":{"rid":%d,"from_id":"AAPAY ","to_id":"AAR   ","msg_id":1,'
                          '"user_id":9,"data":"aGVsbG8="}}' % got["msg"]["rid"])
    assert _json(r.ask({"op": "confirm", "rid": got["msg"]["rid"]})) == '{"id":3,"ok":true}'
    assert _json(r.ask({"op": "recv", "wait": False})) == '{"id":4,"ok":true,"msg":null}'
    assert _json(p.ask({"op": "send", "to": "ZZR", "data": ""})) == \
        ('{"id":3,"ok":false,"error":"host \'ZZ\' is unknown here (not a neighbour, a [[route]], or a host learned '
         'from the network): TO_ID \'ZZR\' refused","code":"unknown_host"}')
