"""The daemon's replies to processes on the socket, as typed values (docs/SOCKET.md).

A reply is one of the frozen dataclasses below (a RECV's messages in it are `Message` tuples);
its `wire()` is the object sent, less the `id` of the request it answers: who gets it and which
request it answers is the address of the effect (`effects.Reply`, whose `wire()` puts the `id`
first). The order of the keys each `wire()` makes is their order on the socket. A failure's
`code` is a `requests.Code`, sent as its value (a StrEnum is a str to JSON and MessagePack alike).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import NamedTuple

from checkpoint.changes import Stored

from mccs.core.requests import CODECS, Code, RequestError

VERSION = 4  # the protocol version the hello reply says (`v`): docs/SOCKET.md


# -- failures ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Refused:
    """A request refused (requests.RequestError): malformed, not permitted, no room, ... Also an
    operator's queue action refused, a frame that is not a request (`id` null), and one over the
    size limit (mccs.daemon.server: no `id` at all, and the connection is closed)."""
    code: Code
    error: str

    @classmethod
    def of(cls, e: RequestError) -> Refused:
        return cls(e.code, str(e))

    def wire(self) -> dict:
        return {"ok": False, "error": self.error, "code": self.code}


@dataclass(frozen=True, slots=True)
class Failed:
    """A request taken, that ended later without its result: a SEND or a batch cancelled while it
    waited for a buffer (`cancelled`), a waiting SEND purged by the operator (`purged`), a ping
    that found no MSG_ID free (`refused`)."""
    code: Code
    error: str

    def wire(self) -> dict:
        return {"ok": False, "code": self.code, "error": self.error}


# -- a process's requests ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Welcome:
    """hello: the process id now held, and what this daemon offers."""
    process: str
    host: str
    max_message: int

    def wire(self) -> dict:
        return {"ok": True, "process": self.process, "host": self.host, "max_message": self.max_message,
                "v": VERSION, "codecs": list(CODECS)}


@dataclass(frozen=True, slots=True)
class Observing:
    """observe: copies of this process's messages come to the connection too."""
    process: str

    def wire(self) -> dict:
        return {"ok": True, "observing": self.process}


@dataclass(frozen=True, slots=True)
class Accepted:
    """send: stored (committed), with its MSG_ID; a retry of a stored SEND gets the same."""
    msg_id: int
    to: str

    def wire(self) -> dict:
        return {"ok": True, "msg_id": self.msg_id, "to": self.to}


@dataclass(frozen=True, slots=True)
class AcceptedMany:
    """send_many: all of the batch stored in one commit; the MSG_IDs in its order."""
    msg_ids: tuple[int, ...]

    def wire(self) -> dict:
        return {"ok": True, "msg_ids": list(self.msg_ids)}


class Message(NamedTuple):
    """A message handed to a RECV. `rid`: what the process confirms it with (None: an observer's
    copy, `copy`, which has nothing to confirm); `ttl`: the seconds its sender still waits (None:
    no limit given); `reply` and `ok`: the reply to a request, and whether that failed. `data` is
    the text, or the Stored text of a large message, which the shell reads from the checkpoint as
    it writes the reply: sent after the reply's object as it is (`bin`), or in `data` for a
    client that did not say `binary`. A named tuple, not a frozen dataclass like the others: a
    RECV makes one a message, and a tuple is made in a third of the time."""
    rid: int | None
    from_id: str
    to_id: str
    msg_id: int
    user_id: int
    data: bytes | Stored
    ttl: float | None = None
    reply: bool = False
    ok: bool = True
    copy: bool = False
    e2e: str = "none"  # how it came: "signed" or "sealed" end to end (mccs.core.e2e), or "none"
    opening: tuple[bytes, bytes] | None = None  # a sealed Stored text: what opens it (never on the wire)

    def wire(self) -> dict:
        body: dict[str, object] = {"rid": self.rid, "from_id": self.from_id, "to_id": self.to_id,
                                   "msg_id": self.msg_id, "user_id": self.user_id}
        if self.rid is None:
            del body["rid"]
        if self.ttl is not None:
            body["ttl"] = self.ttl
        if self.reply:
            body["reply"], body["ok"] = True, self.ok
        if not isinstance(self.data, Stored):
            body["data"] = base64.b64encode(self.data).decode("ascii")
        if self.copy:
            body["copy"] = True
        if self.e2e != "none":
            body["e2e"] = self.e2e
        return body


@dataclass(frozen=True, slots=True)
class Received:
    """recv: the message handed (`more`: the others a RECV with `max` got), or None: nothing (no
    wait, its timeout passed, or FROM_ID's host is unknown here)."""
    msg: Message | None
    more: tuple[Message, ...] = ()

    @property
    def stored(self) -> Stored | None:
        """The large text the shell sends with this reply (only ever the first message's)."""
        data = None if self.msg is None else self.msg.data
        return data if isinstance(data, Stored) else None

    def wire(self) -> dict:
        body: dict[str, object] = {"ok": True, "msg": None if self.msg is None else self.msg.wire()}
        if self.more:
            body["more"] = [m.wire() for m in self.more]
        return body


NOTHING = Received(None)


@dataclass(frozen=True, slots=True)
class Confirmed:
    """confirm: the message is off RECV_LIST for good."""

    def wire(self) -> dict:
        return {"ok": True}


@dataclass(frozen=True, slots=True)
class Cancelled:
    """cancel: `done`, the SEND was taken back (its own request gets Failed, `cancelled`); else
    `stored` is its (MSG_ID, TO_ID) if it was stored meanwhile, or None if no such SEND is known."""
    done: bool
    stored: tuple[int, str] | None = None

    def wire(self) -> dict:
        body: dict[str, object] = {"ok": True, "cancelled": self.done}
        if self.stored is not None:
            body.update(msg_id=self.stored[0], to=self.stored[1])
        return body


# -- ping ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Alive:
    """ping with no host: this daemon is there."""
    host: str

    def wire(self) -> dict:
        return {"ok": True, "host": self.host}


@dataclass(frozen=True, slots=True)
class CallAnswer:
    """line call or hangup: the call's state on that line after the operator's request."""
    peer: str
    call: dict  # as `mccs status` shows it (linedrivers.call_line.CallLine.status)

    def wire(self) -> dict:
        return {"ok": True, "peer": self.peer, **self.call}


@dataclass(frozen=True, slots=True)
class PingAnswer:
    """ping of a host: its daemon answered; `attached`: is process `name` attached there (None
    when no name was asked)."""
    host: str
    name: str
    attached: bool | None

    def wire(self) -> dict:
        return {"ok": True, "answer": True, "host": self.host, "name": self.name, "attached": self.attached}


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """ping of a host: no answer came within its timeout."""
    host: str

    def wire(self) -> dict:
        return {"ok": True, "host": self.host, "answer": None}


# -- administrative (status, codec, queue) ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StatusReport:
    """status: the daemon's state (`mccs status`), as Kernel.status and the shell make it."""
    status: dict

    def wire(self) -> dict:
        return {"ok": True, "status": self.status}


@dataclass(frozen=True, slots=True)
class CodecSwitched:
    """codec: frames are in this codec after this reply, both ways."""
    codec: str

    def wire(self) -> dict:
        return {"ok": True, "codec": self.codec}


@dataclass(frozen=True, slots=True)
class QueueList:
    """queue list: the first entries (mccs.core.queue.entry), and how many more there are."""
    entries: tuple[dict, ...]
    more: int

    def wire(self) -> dict:
        return {"ok": True, "entries": list(self.entries), "more": self.more}


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """queue show (`note` None: not said), hold and release (`note`: "" or what to know)."""
    entry: dict
    note: str | None = None

    def wire(self) -> dict:
        body = {"ok": True, "entry": self.entry}
        if self.note is not None:
            body["note"] = self.note
        return body


@dataclass(frozen=True, slots=True)
class QueuePurge:
    """queue purge: the ids purged, those to be purged once no line holds a piece of them, and
    those left ({"id", "why"})."""
    purged: tuple[str, ...]
    pending: tuple[str, ...]
    skipped: tuple[dict, ...]

    def wire(self) -> dict:
        return {"ok": True, "purged": list(self.purged), "pending": list(self.pending),
                "skipped": list(self.skipped)}


QueueResult = QueueList | QueueEntry | QueuePurge | Refused


@dataclass(frozen=True, slots=True)
class AtHost:
    """An operator's queue request: its result, and the host whose lists these are."""
    host: str
    result: QueueResult

    def wire(self) -> dict:
        return {"host": self.host, **self.result.wire()}


Body = (Refused | Failed | Welcome | Observing | Accepted | AcceptedMany | Received | Confirmed | Cancelled | Alive
        | PingAnswer | NoAnswer | StatusReport | CodecSwitched | AtHost | CallAnswer)
