"""The seam between the daemon and a line protocol: the interface of DESIGN.md section 4.0 as a
Protocol class, and the factory that builds a line's machine from its configuration."""
from __future__ import annotations

from typing import Protocol

from linedrivers.events import Event

from .config import LineConfig


class LineMachine(Protocol):
    """A sans-I/O line protocol state machine (AsyncLine, BscLine)."""
    counters: dict

    def start(self, now: float) -> None: ...
    def stop(self, now: float) -> None: ...
    def send(self, image: bytes) -> None: ...
    def receive_data(self, data: bytes, now: float) -> None: ...
    def data_to_send(self) -> bytes: ...
    def events(self) -> list[Event]: ...
    def next_deadline(self) -> float | None: ...
    def handle_timeout(self, now: float) -> None: ...
    def confirm(self) -> None: ...
    def set_busy(self, flag: bool) -> None: ...
    def room(self) -> int: ...


def make_machine(host: str, lc: LineConfig, max_message: int) -> LineMachine:
    """The protocol's machine with every timer and limit from the config."""
    common = dict(baud=lc.baud, max_message=max_message, reply_timeout=lc.reply_timeout, retry_limit=lc.retry_limit)
    if lc.secret is not None:
        common["secret"] = lc.secret
    if lc.protocol == "async":
        from linedrivers import AsyncLine
        return AsyncLine(host, lc.peer, window=lc.window, xonxoff_safe=lc.xonxoff_safe, keepalive=lc.keepalive,
                         **common)
    from linedrivers import BscLine
    return BscLine(host, lc.peer, role=lc.role, code=lc.code, block_size=lc.block_size,
                   disconnect_timeout=lc.disconnect_timeout, ttd_timeout=lc.ttd_timeout, **common)
