"""`mccs bench line`: goodput of a bare line state machine over a paced vserial line.

One host sends N messages of 128 bytes to the other over a `mccs.testbed.vserial` line paced at the
baud, through pyserial (SerialPort, Link, Station: the same path as the daemon's port layer).
Goodput is message bytes delivered per second, from handing the messages over until the last
one arrives, and is reported as a fraction of

- the line's capacity, baud/10 bytes a second (8N1: 10 bit times a byte), and
- the framing ceiling: the best any implementation of the protocol could do.
  async: 128 / bytes on the wire of one data frame. The line is full duplex, so with a
  window that covers the round trip the acks travel the other way and cost the sender
  nothing; with window 1 (stop-and-wait) each frame also waits for its ack, so the
  stop-and-wait ceiling 128 / (data frame + ack frame) is shown as well.
  bsc: stop-and-wait, 128 / (bytes of one block + its reply); the bid, its ACK0 and the EOT
  are spent once per transmission (every queued message goes in one) and are left out.
Wire bytes are measured, not assumed: the same messages go once through the two machines in
memory (mccs.testbed.linesim) and the frames' FrameTraced sizes are averaged (stuffing included).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

SIZE = 128
TARGETS = {("async", 8): 0.97, ("async", 1): 0.90, ("bsc", None): 0.95}  # of the ceiling, at 9600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("Send 128-byte messages one way over a vserial line paced at each baud and report\n"
                          "goodput against the line's capacity (baud/10 B/s) and the framing ceiling\n"
                          "(async: 128 / data frame bytes; bsc: 128 / (block + reply bytes)), median of runs.\n"
                          "Exit status 1 when a 9600-baud target of issues 3/4 is missed.")
    parser.epilog = ("examples:\n  mccs bench line --protocol async --bauds 9600,115200 --messages 200 --runs 3\n"
                     "  mccs bench line --protocol bsc --json")
    parser.add_argument("--protocol", choices=("async", "bsc"), default="async")
    parser.add_argument("--bauds", default="9600,115200", help="comma-separated line speeds (default %(default)s)")
    parser.add_argument("--messages", type=int, default=100, help="messages per run (default %(default)s)")
    parser.add_argument("--window", type=int, help="async window (default: 8, then 1)")
    parser.add_argument("--runs", type=int, default=3, help="runs per setting; the median is reported")
    parser.add_argument("--seed", type=int, default=1, help="seed of the message data")
    parser.add_argument("--json", action="store_true", help="one JSON object per setting instead of a table")


def machine(protocol: str, local: str, peer: str, baud: int, window: int | None, primary: bool):
    import linedrivers
    if protocol == "async":
        return linedrivers.AsyncLine(local, peer, window=window, baud=baud)
    return linedrivers.BscLine(local, peer, role="primary" if primary else "secondary", baud=baud)


@dataclass
class Result:
    protocol: str
    baud: int
    window: int | None
    messages: int
    runs: int
    frame_bytes: float  # mean wire bytes of one data frame / block
    reply_bytes: float  # mean wire bytes of its ack / reply
    ceiling: float  # fraction of capacity (see module docstring)
    stop_and_wait_ceiling: float
    goodput: float  # median, message bytes per second
    goodputs: list
    of_capacity: float
    of_ceiling: float
    target: float | None

    @property
    def meets(self) -> bool | None:
        return None if self.target is None or self.baud != 9600 else self.of_ceiling >= self.target


def wire_bytes(protocol: str, window: int | None, images: list[bytes]) -> tuple[float, float]:
    """Mean bytes on the wire of one data frame (block) and of one reply, measured in memory."""
    from linedrivers.events import FrameTraced
    from mccs.testbed.linesim import run_pair
    res = run_pair(lambda: machine(protocol, "AA", "BB", 9600, window, True),
                   lambda: machine(protocol, "BB", "AA", 9600, window, False), images, [], start="a")
    res.check()
    data_kinds, reply_kinds = ({"D"}, {"A"}) if protocol == "async" else ({"ETX", "ETB"}, {"ACK0", "ACK1"})
    frames = [e.nbytes for e in res.of("a", FrameTraced) if e.dir == "tx" and e.kind in data_kinds]
    replies = [e.nbytes for e in res.of("b", FrameTraced) if e.dir == "tx" and e.kind in reply_kinds]
    return sum(frames) / len(images), statistics.mean(replies)


def one_run(protocol: str, baud: int, window: int | None, images: list[bytes]) -> float:
    """Goodput in message bytes per second of one run over a fresh paced line."""
    from linedrivers.link import Station
    from mccs.testbed.vserial import Line
    with tempfile.TemporaryDirectory(prefix="mccs-bench-") as d:
        ends = f"{d}/AA.BB", f"{d}/BB.AA"
        with Line(*ends, baud=baud), \
                Station(machine(protocol, "AA", "BB", baud, window, True), ends[0], baudrate=baud) as aa, \
                Station(machine(protocol, "BB", "AA", baud, window, False), ends[1], baudrate=baud) as bb:
            if not (aa.wait(lambda s: s.up, 30) and bb.wait(lambda s: s.up, 30)):
                raise RuntimeError("the line did not come up")
            expected = len(images) * 2 * SIZE * 10 / baud
            t0 = time.monotonic()
            aa.send(images)
            if not bb.wait(lambda s: len(s.received) == len(images), 3 * expected + 30):
                raise RuntimeError(f"only {len(bb.received)} of {len(images)} messages arrived")
            if aa.downs or bb.downs:
                raise RuntimeError(f"the line went down: {aa.downs} {bb.downs}")
            return len(images) * SIZE / (bb.received_at[-1] - t0)


def measure(protocol: str, baud: int, window: int | None, messages: int, runs: int, seed: int) -> Result:
    from mccs.testbed.linesim import make_images
    images = make_images("AA", "BB", messages, SIZE, seed=seed)
    frame, reply = wire_bytes(protocol, window, images)
    capacity = baud / 10
    goodputs = [one_run(protocol, baud, window, images) for _ in range(runs)]
    goodput = statistics.median(goodputs)
    saw = SIZE / (frame + reply)
    ceiling = SIZE / frame if protocol == "async" else saw
    return Result(protocol, baud, window, messages, runs, round(frame, 2), round(reply, 2), round(ceiling, 4),
                  round(saw, 4), round(goodput, 1), [round(g, 1) for g in goodputs],
                  round(goodput / capacity, 4), round(goodput / capacity / ceiling, 4),
                  TARGETS.get((protocol, window)))


def run(args: argparse.Namespace) -> int:
    try:
        bauds = [int(b) for b in args.bauds.split(",")]
    except ValueError:
        print(f"mccs bench line: bad --bauds {args.bauds!r}")
        return 2
    windows = [None] if args.protocol == "bsc" else [args.window] if args.window else [8, 1]
    if not args.json:
        print(f"mccs bench line --protocol {args.protocol}: {args.messages} messages of {SIZE} bytes, "
              f"median of {args.runs} runs")
        print(f"{'baud':>7} {'window':>6} {'frame B':>8} {'reply B':>8} {'goodput B/s':>12} "
              f"{'of line':>8} {'ceiling':>8} {'of ceiling':>10} {'of s&w':>7}  target")
    ok = True
    for baud in bauds:
        for window in windows:
            r = measure(args.protocol, baud, window, args.messages, args.runs, args.seed)
            ok = ok and r.meets is not False
            if args.json:
                print(json.dumps(asdict(r) | {"meets": r.meets}), flush=True)
                continue
            target = "" if r.meets is None else f"{r.target:.0%} {'met' if r.meets else 'MISSED'}"
            saw = f"{r.of_capacity / r.stop_and_wait_ceiling:.1%}" if window in (None, 1) else "-"
            print(f"{baud:>7} {window or '-':>6} {r.frame_bytes:>8.1f} {r.reply_bytes:>8.1f} {r.goodput:>12.1f} "
                  f"{r.of_capacity:>8.1%} {r.ceiling:>8.1%} {r.of_ceiling:>10.1%} {saw:>7}  {target}", flush=True)
    return 0 if ok else 1
