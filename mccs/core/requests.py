"""Requests on the process socket, validated strictly into typed objects.

A request is a JSON object with an `op`; every field is checked for its exact type (a boolean
is not a number, the string "false" is not a boolean), so the daemon's core only ever sees
well-formed requests and a malformed one gets an error reply naming the field.
"""
from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Callable, NamedTuple

from linedrivers.ids import IdError, check_host_id, process_id, process_name

from mccs.core.envelope import PRIORITY_MAX
try:
    import msgpack  # noqa: F401  (only whether it is there: the socket's codecs)
except ImportError:
    msgpack = None
from mccs.core.msgids import ID_SPACE


#: The codecs of the process socket this installation offers (mccs.client.ipc frames them).
CODECS = ("json", "msgpack") if msgpack is not None else ("json",)

class Code(StrEnum):
    """The machine-readable `code` of a refusal or a failed request on the socket (docs/SOCKET.md)."""
    BAD_REQUEST = "bad_request"
    BAD_ID = "bad_id"
    DISK_FULL = "disk_full"
    NO_NAME = "no_name"
    NOT_PERMITTED = "not_permitted"
    NOT_PURGED = "not_purged"
    TOO_LARGE = "too_large"
    UNKNOWN_HOST = "unknown_host"
    CANCELLED = "cancelled"
    PURGED = "purged"
    REFUSED = "refused"
    NO_KEY = "no_key"  # e2e is on and the destination host's key is not trusted here
    TIMEOUT = "timeout"  # the client library's own (NotStored): a SEND's timeout passed; no daemon sends it


class RequestError(ValueError):
    """A request the daemon refuses; `code` is machine-readable (docs/OPERATING.md, exit codes)."""

    def __init__(self, code: Code, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Hello:
    name: str  # 4 characters, blank padded
    observe: bool = False  # an observer of the name, not a handler


@dataclass(frozen=True)
class Observe:
    name: str  # a process name of this host: copies of its messages to this connection too


class Send(NamedTuple):
    """A named tuple, not a frozen dataclass like the others: a send_many makes one an entry."""
    to_id: str
    data: bytes
    user_id: int
    req: str  # the client's random request id ("" = none given)
    ttl: float | None = None  # seconds it may wait on the way (None: the host's ttl)
    receipt: bool = False  # a delivered notice when the destination process has taken it
    priority: int = 0  # 0 to 7: higher goes first
    reply: bool = False  # the reply to a request (USER_ID = the request's MSG_ID)
    ok: bool = True  # a reply's outcome


@dataclass(frozen=True)
class Recv:
    from_id: str  # "" = any
    user_id: int
    wait: bool
    timeout: float | None
    reply_to: int = 0  # only the reply to this request of ours (its MSG_ID)
    confirm: tuple[int, ...] = ()  # rids of messages handed before: confirmed first (one round trip fewer)
    max: int = 1  # an unselective RECV may be handed up to this many messages at once (recv_many)


@dataclass(frozen=True)
class SendMany:
    """SENDs stored as a whole: one commit, all or none, in their order; one reply with the MSG_IDs."""
    sends: tuple[Send, ...]
    req: str  # the client's random request id ("" = none given); entry i is stored as "req/i"


@dataclass(frozen=True)
class Confirm:
    rid: int


@dataclass(frozen=True)
class Cancel:
    req: str


@dataclass(frozen=True)
class Status:
    pass


@dataclass(frozen=True)
class Codec:
    """Frames in `name` from the reply on (ipc): answered by the shell at once."""
    name: str


@dataclass(frozen=True)
class Ping:
    """No host: is the daemon there? A host: a round trip to its daemon, which says whether process
    `name` is attached there (mccs.core.control)."""
    host: str = ""
    name: str = ""  # 4 characters, blank padded; "": none asked
    timeout: float = 5.0  # seconds the answer may take


@dataclass(frozen=True)
class Ref:
    """A message as the operator names it (`mccs queue`): `AA/12`, origin host and MSG_ID; `12`,
    a MSG_ID of this host's own; `#57`, its place in the checkpoint (seq), which is never
    ambiguous and also names a SEND waiting on WAIT_LIST, which has no MSG_ID yet."""
    text: str
    origin: str | None = None  # None: this host
    msg_id: int = 0
    seq: int = 0


QUEUE_ACTIONS = ("list", "show", "hold", "release", "purge")
LIST_MAX = 100_000  # entries in one list reply: a reply stays a bounded piece of work for the daemon


@dataclass(frozen=True)
class QueueRequest:
    """The operator's look at and changes to the lists (`mccs queue`)."""
    action: str
    ref: Ref | None = None
    to: str = ""  # purge: every message for this host
    older_than: float | None = None  # purge: every message stored more than this many seconds ago
    limit: int = LIST_MAX  # list: at most this many entries


@dataclass(frozen=True)
class LineRequest:
    """The operator's call on a line that is a call (`mccs line call|hangup`)."""
    action: str  # "call" or "hangup"
    peer: str


Request = (Hello | Observe | Send | SendMany | Recv | Confirm | Cancel | Status | Codec | Ping | QueueRequest
           | LineRequest)
NAMED = (Observe, Send, SendMany, Recv, Confirm, Cancel)  # need a process name (hello) first
BATCH_MAX = 1000  # entries in one send_many
BATCH_BYTES = 128 << 10  # message bytes in one send_many (the frame limit of the socket follows from it)


def _field(req: dict, key: str, kind: type | tuple[type, ...], default=None, required: bool = False):
    value = req.get(key)
    if value is None:
        if required:
            raise RequestError(Code.BAD_REQUEST, f"missing field {key!r}")
        return default
    if isinstance(value, kind) and (type(value) is not bool or bool in (kind if isinstance(kind, tuple) else (kind,))):
        return value  # (True is an int too: a boolean only where one is asked for)
    raise RequestError(Code.BAD_REQUEST, f"{key} must be {_names(kind)}, not "
                                      f"{'a boolean' if isinstance(value, bool) else type(value).__name__}")


def _names(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({int: "an integer", float: "a number", str: "a string", bool: "true or false",
                        list: "a list"}[k]
                       for k in kinds)


def _user_id(req: dict) -> int:
    user_id = _field(req, "user_id", int, 0)
    if not 0 <= user_id <= 0xFFFF:
        raise RequestError(Code.BAD_REQUEST, f"USER_ID {user_id} is not a 16-bit number")
    return user_id


def _id(value: str, key: str) -> str:
    try:
        return process_id(value)
    except IdError as e:
        raise RequestError(Code.BAD_ID, f"{key}: {e}") from None


def _data(req: dict) -> bytes:
    if "bin" in req:  # sent as it is after the request (ipc.Deframer)
        if not isinstance(req["bin"], (bytes, bytearray)) or "data" in req:
            raise RequestError(Code.BAD_REQUEST, "bin must be the size of the data that follows, and no data field")
        return bytes(req["bin"])  # ipc.Deframer fills a bytearray; the core holds a text as bytes
    if isinstance(req.get("data"), bytes):  # MessagePack: as it is
        return req["data"]
    try:
        return base64.b64decode(_field(req, "data", str, ""), validate=True)
    except (binascii.Error, ValueError) as e:
        raise RequestError(Code.BAD_REQUEST, f"data is not valid base64: {e}") from None


def _req(req: dict) -> str:
    request_id = _field(req, "req", str, "")
    if len(request_id) > 64:
        raise RequestError(Code.BAD_REQUEST, "req must be at most 64 characters (a random request id)")
    return request_id


ID_TYPES = (type(None), bool, int, float, str)  # what a request's `id` may be: JSON and MessagePack carry each


def parse(req: dict) -> Request:
    """The typed request, or RequestError."""
    op = req.get("op")
    if not isinstance(op, str) or op not in _PARSERS:
        raise RequestError(Code.BAD_REQUEST, f"unknown op {op!r} ({', '.join(_PARSERS)})")
    return _PARSERS[op](req)


def _name(req: dict) -> str:
    try:
        return process_name(_field(req, "name", str, required=True))
    except IdError as e:
        raise RequestError(Code.BAD_ID, str(e)) from None


def _seconds(req: dict, key: str, low: float = 0.0) -> float | None:
    value = _field(req, key, (int, float))
    if value is not None and not (math.isfinite(value) and value >= low):
        raise RequestError(Code.BAD_REQUEST, f"{key} {value!r} is not a finite number of seconds >= {low:g}")
    return None if value is None else float(value)


def _send(req: dict) -> Send:
    ttl = _seconds(req, "ttl", 0.1)
    priority = _field(req, "priority", int, 0)
    if not 0 <= priority <= PRIORITY_MAX:
        raise RequestError(Code.BAD_REQUEST, f"priority {priority} is not within 0..{PRIORITY_MAX}")
    reply, ok = _field(req, "reply", bool, False), _field(req, "ok", bool, True)
    if not (reply or ok):
        raise RequestError(Code.BAD_REQUEST, "ok=false is the outcome of a reply: give reply=true too")
    if reply and not _user_id(req):
        raise RequestError(Code.BAD_REQUEST, "a reply's user_id is the MSG_ID of the request it answers")
    if reply and _field(req, "receipt", bool, False):
        raise RequestError(Code.BAD_REQUEST, "a reply gets no receipt (it is a notice of its kind)")
    return Send(_id(_field(req, "to", str, required=True), "to"), _data(req), _user_id(req), _req(req), ttl,
                _field(req, "receipt", bool, False), priority, reply, ok)


def _recv(req: dict) -> Recv:
    from_id = _field(req, "from", str, "")
    reply_to = _field(req, "reply_to", int, 0)
    if not 0 <= reply_to <= ID_SPACE:
        raise RequestError(Code.BAD_REQUEST, f"reply_to {reply_to} is not a MSG_ID")
    confirm = _field(req, "confirm", (int, list), [])
    confirm = [confirm] if isinstance(confirm, int) else confirm
    if len(confirm) > BATCH_MAX or not all(type(rid) is int for rid in confirm):
        raise RequestError(Code.BAD_REQUEST, f"confirm must be a rid or a list of at most {BATCH_MAX} rids")
    most = _field(req, "max", int, 1)
    if not 1 <= most <= BATCH_MAX:
        raise RequestError(Code.BAD_REQUEST, f"max {most} is not within 1..{BATCH_MAX}")
    if most > 1 and (from_id.strip() or _user_id(req) or reply_to):
        raise RequestError(Code.BAD_REQUEST, "max is for a RECV of any message: no from, user_id or reply_to")
    return Recv(_id(from_id, "from") if from_id.strip() else "", _user_id(req), _field(req, "wait", bool, True),
                _seconds(req, "timeout"), reply_to, tuple(confirm), most)


def _send_many(req: dict) -> SendMany:
    msgs = _field(req, "msgs", list, required=True)
    if not 1 <= len(msgs) <= BATCH_MAX:
        raise RequestError(Code.BAD_REQUEST, f"msgs has {len(msgs)} entries: a batch has 1 to {BATCH_MAX}")
    sends = []
    for i, entry in enumerate(msgs):
        try:
            if not isinstance(entry, dict):
                raise RequestError(Code.BAD_REQUEST, f"an entry is an object, not {type(entry).__name__}")
            if "bin" in entry or "req" in entry:
                raise RequestError(Code.BAD_REQUEST, "an entry has no bin or req (its data goes in data)")
            sends.append(_send(entry))
        except RequestError as e:
            raise RequestError(e.code, f"msgs[{i}]: {e}") from None
    size = sum(len(s.data) for s in sends)
    if size > BATCH_BYTES:
        raise RequestError(Code.TOO_LARGE, f"a batch of {size} bytes is over the maximum of {BATCH_BYTES}")
    return SendMany(tuple(sends), _req(req))


def parse_ref(text: str) -> Ref:
    """`AA/12`, `12` or `#57` (see Ref); RequestError for anything else."""
    host, slash, number = text[:2], text[2:3], text[3:]
    if slash == "/" and number.isdigit() and check_host(host):
        ref = Ref(text, host, msg_id=int(number))
    elif text[:1] == "#" and text[1:].isdigit():
        ref = Ref(text, seq=int(text[1:]))
    elif text.isdigit():
        ref = Ref(text, msg_id=int(text))
    else:
        raise RequestError(Code.BAD_ID, f"message id {text!r} is not ORIGIN/MSG_ID (e.g. AA/12), MSG_ID (this "
                                     "host's own) or #SEQ (its place in the checkpoint, as 'mccs queue list' shows)")
    if not (1 <= ref.msg_id <= ID_SPACE or 1 <= ref.seq < 1 << 63):
        raise RequestError(Code.BAD_ID, f"message id {text!r}: a MSG_ID is 1 to {ID_SPACE}, a #SEQ at least 1")
    return ref


def check_host(host: str) -> bool:
    try:
        return bool(check_host_id(host))
    except IdError:
        return False


def _queue(req: dict) -> QueueRequest:
    action = _field(req, "action", str, required=True)
    if action not in QUEUE_ACTIONS:
        raise RequestError(Code.BAD_REQUEST, f"unknown queue action {action!r} ({', '.join(QUEUE_ACTIONS)})")
    text, to = _field(req, "msg", str), _field(req, "to", str, "")
    ref = parse_ref(text) if text is not None else None
    if to and not check_host(to):
        raise RequestError(Code.BAD_ID, f"to: {to!r} is not a host id (2 printable characters, no blank)")
    limit = _field(req, "limit", int, 0)
    if not 0 <= limit <= LIST_MAX:
        raise RequestError(Code.BAD_REQUEST, f"limit {limit} is not within 0..{LIST_MAX}")
    op = QueueRequest(action, ref, to, _seconds(req, "older_than"), limit or LIST_MAX)
    filters = bool(op.to) or op.older_than is not None
    if action == "list" and (ref or filters):
        raise RequestError(Code.BAD_REQUEST, "list takes no message id, to or older_than")
    if action in ("show", "hold", "release") and (ref is None or filters):
        raise RequestError(Code.BAD_REQUEST, f"{action} takes one message id (msg) and nothing else")
    if action == "purge" and (ref is None) == (not filters):
        raise RequestError(Code.BAD_REQUEST, "purge takes one message id (msg), or to and/or older_than")
    return op


def _line(req: dict) -> LineRequest:
    action, peer = _field(req, "action", str, required=True), _field(req, "peer", str, required=True)
    if action not in ("call", "hangup"):
        raise RequestError(Code.BAD_REQUEST, f"unknown line action {action!r} (call, hangup)")
    if not check_host(peer):
        raise RequestError(Code.BAD_ID, f"peer: {peer!r} is not a host id (2 printable characters, no blank)")
    return LineRequest(action, peer)


def _ping(req: dict) -> Ping:
    host, name = _field(req, "host", str, ""), _field(req, "name", str, "")
    if host and not check_host(host):
        raise RequestError(Code.BAD_ID, f"host: {host!r} is not a host id (2 printable characters, no blank)")
    if name and not host:
        raise RequestError(Code.BAD_REQUEST, "a ping names a process only with its host")
    try:
        name = process_name(name) if name else ""
    except IdError as e:
        raise RequestError(Code.BAD_ID, f"name: {e}") from None
    timeout = _seconds(req, "timeout", 0.1)
    return Ping(host, name, 5.0 if timeout is None else min(timeout, 3600.0))


def _codec(req: dict) -> Codec:
    name = _field(req, "name", str, required=True)
    if name not in CODECS:
        raise RequestError(Code.BAD_REQUEST, f"codec {name!r} is not offered here ({', '.join(CODECS)})")
    return Codec(name)


def _confirm(req: dict) -> Confirm:
    return Confirm(_field(req, "rid", int, required=True))


_PARSERS: dict[str, Callable[[dict], Request]] = {
    "hello": lambda req: Hello(_name(req), _field(req, "observe", bool, False)),
    "observe": lambda req: Observe(_name(req)), "send": _send, "send_many": _send_many, "recv": _recv,
    "confirm": _confirm,
    "cancel": lambda req: Cancel(_req(req)), "status": lambda req: Status(), "codec": _codec, "ping": _ping,
    "queue": _queue, "line": _line}
