"""What one pass of the daemon's core asks its shell to do, in the order the rules need it done.

The order of the fields of `Effects` is the durability rule of docs/DESIGN.md sections 4.3 and 5:
first the checkpoint changes (one transaction, committed), then the trace events (written,
before anything that depends on them), then the replies to processes, then the bytes for the
lines (acknowledgements among them), then the programs to start for messages that wait. If the
commit fails, nothing after it is done.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from checkpoint.changes import Change, Stored

from mccs.core.replies import Body, Received


class TraceEvent(NamedTuple):
    """One trace line of docs/DESIGN.md section 6; the writer adds v, ts and host. A named tuple: a
    pass makes one or more a message."""
    type: str  # frame, msg or line
    kind: str
    line: str | None = None
    proto: str | None = None
    fields: Mapping = MappingProxyType({})
    at: float | None = None  # wall time it happened, if before the pass that writes it


class Reply(NamedTuple):
    """`body` (mccs.core.replies) to connection `conn`, the reply to its request `rid`. A named
    tuple, as TraceEvent: a pass makes one or more a message."""
    conn: int
    rid: object  # the request's `id`, echoed (None: it had none, or could not be read)
    body: Body

    def wire(self) -> dict:
        """The object framed on the socket: the request's `id` first, then the body's keys."""
        return {"id": self.rid, **self.body.wire()}

    @property
    def stored(self) -> Stored | None:
        """A large text to send with the reply, read from the checkpoint as it is written."""
        return self.body.stored if isinstance(self.body, Received) else None


@dataclass(frozen=True)
class LineWrite:
    peer: str
    data: bytes
    dtr: bool | None = None  # then the port's DTR set to this (a call hung up on a port with modem lines)


@dataclass(frozen=True)
class StartProgram:
    """Run a `[[process]] start` program for process `pid` (the shell says when it exits)."""
    pid: str
    command: str


@dataclass
class Effects:
    changes: list[Change] = field(default_factory=list)
    traces: list[TraceEvent] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    writes: list[LineWrite] = field(default_factory=list)
    starts: list[StartProgram] = field(default_factory=list)  # after the replies: the message waits, committed
    reads: list[tuple[Stored, int, int]] = field(default_factory=list)  # pieces of large texts to read, for
    #                                       the next pass (mccs.core.segments.Blobs): (text, offset, bytes)
    deadline: float | None = None  # run the next pass by this monotonic time
    write_at: float | None = None  # call Kernel.write_paced at this monotonic time (paced writes)

    def change(self, *changes: Change) -> None:
        self.changes.extend(changes)

    def trace(self, type_: str, kind: str, line: str | None = None, proto: str | None = None,
              at: float | None = None, **fields) -> None:
        self.traces.append(TraceEvent(type_, kind, line, proto, fields, at))

    def reply(self, conn: int | None, rid: object, body: Body) -> None:
        """`body` answers request `rid` of connection `conn` (None: gone, nothing to send)."""
        if conn is not None:
            self.replies.append(Reply(conn, rid, body))

    def write(self, peer: str, data: bytes) -> None:
        if data:
            self.writes.append(LineWrite(peer, data))

    def set_dtr(self, peer: str, level: bool) -> None:
        self.writes.append(LineWrite(peer, b"", level))

    def start(self, pid: str, command: str) -> None:
        self.starts.append(StartProgram(pid, command))

    def wake_at(self, when: float | None) -> None:
        if when is not None and (self.deadline is None or when < self.deadline):
            self.deadline = when
