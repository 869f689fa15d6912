"""Virtual null-modem serial lines for a network of hosts, and `mccs vserial`.

`Lines` makes one `Line` (vserial_line: two pty pairs joined by a relay with pacing and
faults) per "AA-BB" spec, each end named after the host that uses it; `mccs vserial` runs
them until Ctrl-C.

    with Lines("/tmp/vs", ["AA-BB"], baud=9600, ber=1e-4) as vl:
        port = vl.port("AA", "BB")      # /tmp/vs/AA.BB, host AA's end of its line to BB

With `modems=True` every end is an emulated Hayes modem (mccs.testbed.hayes_modem): line i (from
1) has the numbers 555ii01 at its first host's end and 555ii02 at the other's; `vl.number("BB",
"AA")` is what AA dials to reach BB.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Iterable

from mccs.daemon.service import stop_on_sigterm
from mccs.testbed.vserial_line import ACTIONS, BUFFER, QUANTUM, Line, LogSink, flap

# One line's names stay importable from here, where callers have always found them.
__all__ = ["QUANTUM", "BUFFER", "ACTIONS", "LogSink", "flap", "Line", "Lines", "parse_spec", "add_arguments", "run"]


class Lines:
    """Many lines at once, for a network of hosts: spec "AA-BB" makes DIR/AA.BB (host AA's
    port to BB) and DIR/BB.AA. The keyword arguments go to every Line; line i gets seed+i,
    and a callable schedule is called once per line (e.g. `lambda: flap(30, 2)`)."""

    def __init__(self, directory: str, specs: Iterable[str], **kwargs) -> None:
        self.directory = directory
        self.lines: dict[str, Line] = {}
        seed = kwargs.pop("seed", None)
        schedule = kwargs.pop("schedule", ())
        modems = kwargs.pop("modems", False)
        self.numbers: dict[tuple[str, str], str] = {}
        for i, spec in enumerate(specs):
            a, b = parse_spec(spec)
            if modems:
                self.numbers[a, b], self.numbers[b, a] = f"555{i + 1:02d}01", f"555{i + 1:02d}02"
            self.lines[spec] = Line(self.port(a, b), self.port(b, a), seed=None if seed is None else seed + i,
                                    schedule=schedule() if callable(schedule) else schedule,
                                    modems=(self.numbers[a, b], self.numbers[b, a]) if modems else None, **kwargs)

    def number(self, host: str, peer: str) -> str:
        """The telephone number of host's modem on its line to peer (modems=True)."""
        return self.numbers[host, peer]

    def port(self, host: str, peer: str) -> str:
        """The device path host uses for its line to peer."""
        return os.path.join(self.directory, f"{host}.{peer}")

    def __enter__(self) -> "Lines":
        try:
            for line in self.lines.values():
                line.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for line in self.lines.values():
            if line.state != "closed":
                line.close()


def parse_spec(spec: str) -> tuple[str, str]:
    a, sep, b = spec.partition("-")
    if not sep or not a or not b or a == b:
        raise ValueError(f"line {spec!r} is not of the form AA-BB")
    return a, b


# ---- mccs vserial ----------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("Run virtual null-modem serial lines until Ctrl-C. Each line AA-BB is two pty\n"
                          "pairs joined by a relay that paces bytes to the baud (10 bit times a byte)\n"
                          "and adds faults; DIR/AA.BB is host AA's port to BB, DIR/BB.AA the other end.\n"
                          "Open them with any serial program (pyserial, screen, minicom).")
    parser.epilog = ("examples:\n"
                     "  mccs vserial --dir /tmp/vs AA-BB BB-CC --baud 9600 --ber 1e-4 --latency 0.01\n"
                     "  mccs vserial --dir /tmp/vs AA-BB --flap 30,2 --hangup   # pull the cable every 30 s for 2 s\n"
                     "  mccs vserial --dir /tmp/vs AA-BB --log /tmp/vs/AA-BB.log"
                     "  # every byte, with time and direction\n"
                     "  mccs vserial --dir /tmp/vs AA-BB --modem   # Hayes modems at both ends: ATD5550102 from AA")
    parser.add_argument("lines", nargs="+", metavar="AA-BB", help="a line between hosts AA and BB")
    parser.add_argument("--dir", default="/tmp/mccs-vserial", help="where the end symlinks go (default %(default)s)")
    parser.add_argument("--baud", type=int, default=9600, help="line speed in bit/s (default %(default)s)")
    parser.add_argument("--latency", type=float, default=0.0, help="one-way latency in seconds")
    parser.add_argument("--ber", type=float, default=0.0, help="bit-error rate, e.g. 1e-4")
    parser.add_argument("--drop", type=float, default=0.0, help="probability that a byte is lost")
    parser.add_argument("--insert", type=float, default=0.0, help="probability that a random byte is added")
    parser.add_argument("--seed", type=int, help="random seed for the faults (line i uses SEED+i)")
    parser.add_argument("--flap", metavar="UP,DOWN", help="disconnect every UP seconds for DOWN seconds")
    parser.add_argument("--hangup", action="store_true",
                        help="with --flap: hang up (ports vanish) instead of going silent")
    parser.add_argument("--log", metavar="FILE", help="append every byte (epoch time, direction, hex) to FILE")
    parser.add_argument("--modem", action="store_true",
                        help="an emulated Hayes modem at each end: the line carries data only during a call "
                             "(line i: 555ii01 at its first host, 555ii02 at the other)")


def run(args: argparse.Namespace) -> int:
    kwargs = dict(baud=args.baud, latency=args.latency, ber=args.ber, drop=args.drop,
                  insert=args.insert, seed=args.seed, log=args.log, modems=args.modem)
    try:
        if args.flap:
            up, down = (float(x) for x in args.flap.split(","))
            kwargs["schedule"] = lambda: flap(up, down, "hangup" if args.hangup else "disconnect")
        lines = Lines(args.dir, args.lines, **kwargs)
    except ValueError as e:
        print(f"mccs vserial: {e}", file=sys.stderr)
        return 2
    stop_on_sigterm()  # SIGTERM stops the lines as Ctrl-C does
    try:
        with lines:
            for spec, line in lines.lines.items():
                numbers = f"  modems {line.modems[0].number} <=> {line.modems[1].number}" if line.modems else ""
                print(f"{spec}: {line.end_a} -> {line.devices[0]}  <=>  {line.end_b} -> {line.devices[1]}"
                      f"  ({args.baud} baud){numbers}", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:  # the lines are closed on the way out of `with`
        pass
    for spec, line in lines.lines.items():
        print(f"{spec}: {line.counters}", flush=True)
    return 0
