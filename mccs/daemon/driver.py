"""The one driver of the daemon's core: how a pass's Effects are performed, and what a request
needs from the checkpoint before the core sees it. The daemon (mccs.daemon.shell) and the in-memory
simulator (mccs/testbed/hostsim.py) both drive the Kernel through this module, so that a test in memory
runs the daemon's own order of things.

The order is the durability rule (docs/DESIGN.md sections 4.3 and 5): the pass's checkpoint
changes are committed first, in one transaction; then its trace events are written and flushed;
then the replies go to the processes (typed values, mccs.core.replies: the shell frames each
one's `wire()`, a large text read from the checkpoint as it is sent), the bytes to the lines
(acknowledgements among them), and the programs are started. If the commit fails, nothing after
it is done: nothing that depends on a change leaves before the change is durable. The pieces of
large texts the pass asked for are read right after the commit and handed to the core.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from checkpoint.changes import Stored
from checkpoint.store import Checkpoint

from mccs.core import e2e
from mccs.core.effects import Effects, LineWrite, Reply, StartProgram, TraceEvent
from mccs.core.replies import Received
from mccs.core.requests import Cancel, Request, Send, SendMany


class Shell(Protocol):
    """What the driver needs of the world around the core (the daemon's, or a simulated one)."""

    def emit_trace(self, ev: TraceEvent) -> None: ...
    def flush_traces(self) -> None: ...
    def send_reply(self, reply: Reply) -> None: ...
    def write_line(self, peer: str, data: bytes) -> None: ...
    def set_dtr(self, peer: str, level: bool) -> None: ...
    def start_program(self, start: StartProgram) -> None: ...
    def pieces_read(self, pieces: list[tuple[Stored, int, bytes]]) -> None: ...


def perform(fx: Effects, cp: Checkpoint, shell: Shell) -> None:
    """A pass's effects, in the durability order. What the commit raises is raised before
    anything else is done (the caller rolls the pass back)."""
    cp.apply(fx.changes)
    if fx.reads:  # pieces of large texts for the next pass: the core reads no file itself
        shell.pieces_read([(where, offset, cp.read_blob(where, offset, n)) for where, offset, n in fx.reads])
    for ev in fx.traces:
        shell.emit_trace(ev)
    shell.flush_traces()  # before the replies and acknowledgements that depend on these events
    for reply in fx.replies:
        shell.send_reply(reply)
    write_lines(fx.writes, shell)
    for start in fx.starts:
        shell.start_program(start)


def write_lines(writes: list[LineWrite], shell: Shell) -> None:
    """Bytes to the lines, and DTR after them where a call is hung up so."""
    for w in writes:
        if w.data:
            shell.write_line(w.peer, w.data)
        if w.dtr is not None:
            shell.set_dtr(w.peer, w.dtr)


def reply_text(cp: Checkpoint, reply: Reply, piece: int = 1 << 20) -> Iterator[bytes]:
    """The large text a reply carries, read from the checkpoint piece by piece as it is sent; a
    sealed one (kept encrypted at its destination, docs/E2E.md) opened on the way."""
    stored = reply.stored
    if stored is None:
        return
    opening = reply.body.msg.opening if isinstance(reply.body, Received) and reply.body.msg else None
    stream = e2e.opener(opening) if opening else None
    for offset in range(0, stored.size, piece):
        data = cp.read_blob(stored, offset, piece)
        yield stream.update(data) if stream is not None else data


def prior(cp: Checkpoint, req: Request):
    """What the checkpoint says a SEND (or a batch, or a cancel) with this request id got: the
    core's input for a retry after a restart, so that it is stored once."""
    if isinstance(req, (Send, Cancel)) and req.req:
        return cp.find_send_done(req.req)
    if isinstance(req, SendMany) and req.req and cp.find_send_done(f"{req.req}/0"):
        found = [cp.find_send_done(f"{req.req}/{i}") for i in range(len(req.sends))]
        return found if all(found) else None
    return None
