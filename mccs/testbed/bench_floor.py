"""The stop-and-wait floor of a paced vserial line (`mccs bench bulk`, BSC): how much of the line a
bare exchange of blocks and replies gets through the relay, with no protocol and no daemon.

The BSC ceiling counts only bytes (a block and its reply at the baud, no time between them); a
real line also spends a turnaround per block: here, the relay's wake-ups and two processes' reads
and writes. Two processes that only read and write raw bytes (blocking, no event loop, no parsing)
measure that floor over the same kind of line, so that a BSC figure can be read against what the
testbed itself allows, beside the ceiling.
"""
from __future__ import annotations

import multiprocessing
import os
import time
import tty
from pathlib import Path

from mccs.testbed.vserial_line import Line

SECONDS = 5.0  # about how long the exchange runs
LEAST_ROUNDS = 20


def _read(fd: int, n: int) -> None:
    got = 0
    while got < n:
        got += len(os.read(fd, n - got))


def _side(path: str, block: int, reply: int, rounds: int, sender: bool, q) -> None:
    """One end: the sender writes a block and waits for the reply, `rounds` times, and says how long
    that took; the receiver reads each block and answers it."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    tty.setraw(fd)
    data, answer = os.urandom(block), os.urandom(reply)
    try:
        if not sender:
            q.put("ready")
            for _ in range(rounds):
                _read(fd, block)
                os.write(fd, answer)
            return
        q.get()
        t0 = time.perf_counter()
        for _ in range(rounds):
            os.write(fd, data)
            _read(fd, reply)
        q.put(time.perf_counter() - t0)
    finally:
        os.close(fd)


def floor(directory: Path, baud: int, block_bytes: int, reply_bytes: int, payload: int) -> float:
    """The fraction of the line's capacity (baud / 10 bytes a second) that `payload` bytes a block
    get when each block of `block_bytes` on the wire waits for a reply of `reply_bytes`."""
    rounds = max(LEAST_ROUNDS, int(SECONDS * baud / 10 / (block_bytes + reply_bytes)))
    directory.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    with Line(str(directory / "A"), str(directory / "B"), baud=baud) as line:
        ends = [ctx.Process(target=_side, args=(path, block_bytes, reply_bytes, rounds, sender, q), daemon=True)
                for path, sender in ((line.end_b, False), (line.end_a, True))]
        for p in ends:
            p.start()
        for p in ends:
            p.join(timeout=10 * SECONDS + 60)
        if any(p.exitcode != 0 for p in ends):
            raise RuntimeError("the bare exchange over the relay did not finish")
        seconds = q.get(timeout=5)
    return payload * rounds / seconds / (baud / 10)
