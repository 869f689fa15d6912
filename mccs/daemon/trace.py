"""The trace writer: JSON Lines under trace_dir (docs/DESIGN.md section 6), rotated by size.

Msg and line events are written by the daemon's next `flush()`, which every loop pass makes
after its commit and before its replies (an OS write, no fsync): they precede the reply that
depends on them and a kill -9 loses none. Frame events wait in the same buffer, so a pass costs
one write whatever it traced. A trace that cannot be written is logged and counted, never fatal:
traces serve the operator, the messages come first.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import orjson

from mccs.core.effects import TraceEvent

log = logging.getLogger("mccs.daemon.trace")

VERSION = 1
_JSON = json.JSONEncoder(separators=(",", ":"))  # for what orjson refuses (a lone surrogate, an int over 64 bits)


class TraceWriter:
    def __init__(self, trace_dir: str | os.PathLike, host: str, max_bytes: int = 64 << 20):
        self.dir = Path(trace_dir)
        self.host = host
        self.max_bytes = max_bytes
        self.errors = 0
        self._fd: int | None = None
        self._size = 0
        self._part = 0
        self._pending = bytearray()  # one buffer: orjson's results kept as a list cost 5 x its encoding
        self._stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"
        self._open()

    def _open(self) -> None:
        self._part += 1
        path = self.dir / f"{self.host}-{self._stamp}-{self._part:03d}.jsonl"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
            self._size = 0
        except OSError as e:
            self._fd = None
            self._fail(e)

    def _fail(self, e: OSError) -> None:
        self.errors += 1
        if self.errors in (1, 10, 100) or self.errors % 1000 == 0:
            log.warning("trace write failed (%d so far): %s", self.errors, e)

    def write(self, ev: TraceEvent) -> None:
        """Buffered until the next flush(), which every pass makes after its commit and before its
        replies; absent fields are left out; `ts` is when it happened (ev.at) or now, to the µs.
        Encoded by orjson: with the stdlib encoder, traces were a fifth of a busy daemon's time."""
        at = time.time() if ev.at is None else ev.at
        event = {"v": VERSION, "ts": round(at * 1e6) / 1e6, "host": self.host, "line": ev.line, "proto": ev.proto,
                 "type": ev.type, "kind": ev.kind}
        event.update(ev.fields if None not in ev.fields.values() else
                     ((k, v) for k, v in ev.fields.items() if v is not None))
        try:
            self._pending += orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # orjson.JSONEncodeError (see _JSON)
            self._pending += (_JSON.encode(event) + "\n").encode()

    def _write(self, data: bytes | bytearray) -> None:
        if self._fd is None or self._size >= self.max_bytes:
            if self._fd is not None:
                os.close(self._fd)
            self._open()
        if self._fd is None:
            return
        try:
            self._size += os.write(self._fd, data)
        except OSError as e:
            self._fail(e)

    def flush(self) -> None:
        if self._pending:
            self._write(self._pending)
            self._pending.clear()

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
