"""`mccs send`, `mccs recv`, `mccs request`, `mccs reply` and `mccs status`: the primitives from the shell."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from mccs.client import GRACE, Client, DaemonUnreachable, MCCSError, Message, NotStored, Refused
from mccs.config import MAX_MESSAGE, ConfigError, load
from mccs.core.envelope import PRIORITY_MAX
from mccs.core.notices import describe
from mccs.client.ipc import b64

EXIT_OK, EXIT_NOTHING, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_NOT_STORED, EXIT_FAILED = 0, 1, 2, 3, 4, 5


def _common(p: argparse.ArgumentParser, name: bool = True) -> None:
    p.add_argument("-c", "--config", default=os.environ.get("MCCS_CONFIG"),
                   help="host TOML config, or the daemon's socket (default: $MCCS_CONFIG)")
    if name:
        p.add_argument("--as", dest="name", default=os.environ.get("MCCS_NAME"),
                       help="this process's name, 1-4 characters (default: $MCCS_NAME)")


def add_send_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("to_id", metavar="TO_ID", help="destination process id, e.g. BBPAY (host id + name)")
    p.add_argument("data", metavar="DATA", nargs="?", default=None, help="the message; - or absent: read stdin")
    p.add_argument("--file", metavar="PATH", help="send the contents of this file (up to the host's max_message, "
                                                  "16 MiB at most); on a terminal a progress bar shows how much "
                                                  "has been handed to the daemon")
    p.add_argument("--user-id", type=int, default=0, help="16-bit USER_ID (0: use the MSG_ID)")
    p.add_argument("--timeout", type=_seconds, default=None,
                   help="give up (exit 4, nothing stored) if the message is not stored within S seconds; "
                        "default: wait while the daemon's buffers are full, as long as the daemon answers")
    p.add_argument("--ttl", type=_seconds, default=None, metavar="S",
                   help="the message may wait on the way at most S seconds, then it is removed and an "
                        "undeliverable notice comes back (from its destination, or from its origin if it never "
                        "left it) (default: [host] ttl)")
    p.add_argument("--receipt", action="store_true",
                   help="ask for a delivered notice once the destination process has taken the message; "
                        "notices arrive as messages from HHMCCS (receive them with 'mccs recv')")
    p.add_argument("--priority", type=_priority, default=0, metavar="P",
                   help="0 (default) to 7: a waiting message of higher priority goes first on every line and "
                        "to a RECV that selects nothing; order is kept among messages of one priority")
    p.add_argument("--wait-delivered", action="store_true",
                   help="ask for a receipt and wait for it: show the transfer on this host's line (bytes, rate, "
                        "ETA), then exit 0 once the destination process has taken the message, 1 if it comes "
                        "back undeliverable (its notice is taken by this command)")


def _priority(text: str) -> int:
    if not text.isdigit() or int(text) > PRIORITY_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a priority 0 to {PRIORITY_MAX}")
    return int(text)


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1e9:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def add_recv_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--from", dest="from_id", default="", help="only a message from this process id")
    p.add_argument("--user-id", type=int, default=0, help="only a message with this USER_ID")
    p.add_argument("--nowait", action="store_true", help="return at once (exit 1) if nothing matches")
    p.add_argument("--timeout", type=_seconds, default=None, help="wait at most S seconds (exit 1 if nothing)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the raw data")
    p.add_argument("--out", metavar="PATH", help="write the message's data to this file (made whole, then "
                                                 "renamed into place) instead of stdout")
    p.add_argument("--observe", action="store_true",
                   help="attach as an observer of NAME: a copy of the next message that arrives for it (its "
                        "handler gets the message itself)")


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("to_id", metavar="TO_ID", help="the process id that answers, e.g. BBPRNT")
    p.add_argument("data", metavar="DATA", nargs="?", default=None, help="the request; - or absent: read stdin")
    p.add_argument("--timeout", type=_seconds, required=True,
                   help="wait at most S seconds for the reply (exit 1 if none came; a later one is dropped)")
    p.add_argument("--json", action="store_true", help="print the reply as one JSON object (with ok)")


def add_reply_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("data", metavar="DATA", nargs="?", default=None, help="the reply; - or absent: read stdin")
    p.add_argument("--to", dest="to_id", required=True, help="the request's FROM_ID (mccs recv --json: from_id)")
    p.add_argument("--msg-id", type=int, required=True, help="the request's MSG_ID (mccs recv --json: msg_id)")
    p.add_argument("--ttl", type=_seconds, default=None,
                   help="seconds its sender still waits (mccs recv --json: ttl); 0: it stopped, nothing is sent")
    p.add_argument("--fail", action="store_true", help="the reply says the request failed (ok false; "
                                                       "mccs request exits 5)")


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, name=False)
    p.add_argument("--json", action="store_true", help="machine-readable output (with --watch: a line of JSON "
                                                       "a second)")
    p.add_argument("--timeout", type=_seconds, default=GRACE,
                   help=f"seconds the daemon has to answer (default {GRACE:g}); then exit 3")
    p.add_argument("--watch", action="store_true",
                   help="a live view, redrawn every second like top: each line's state, rates in and out, window "
                        "use, retransmissions in the last minute, the message in transfer; list lengths; the "
                        "oldest waiting message per destination. Ctrl-C ends it")


def add_ping_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, name=False)
    p.add_argument("target", metavar="HOST[PROC]", help="a host id (BB), or a host and a process name (BBLEDG): "
                                                         "its daemon also says whether LEDG is attached there")
    p.add_argument("--count", type=int, default=1, metavar="N", help="pings, one a second (default 1)")
    p.add_argument("--timeout", type=_seconds, default=GRACE,
                   help=f"seconds an answer may take (default {GRACE:g}); a ping without one is lost")


def operator_options() -> argparse.ArgumentParser:
    """The options of an operator's command on a running daemon (`mccs queue`, `mccs line`), as a
    parent parser for each of its actions."""
    options = argparse.ArgumentParser(add_help=False)
    _common(options, name=False)
    options.add_argument("--json", action="store_true", help="machine-readable output")
    options.add_argument("--timeout", type=_seconds, default=GRACE,
                         help=f"seconds the daemon has to answer (default {GRACE:g}); then exit 3")
    return options


def _fail(code: int, message: str) -> int:
    print(f"mccs: {message}", file=sys.stderr)
    return code


def _client(args, observe: bool = False, carry_confirms: bool = False) -> Client:
    if not args.config:
        raise _Usage("no config: give -c host.toml or set MCCS_CONFIG")
    if not args.name:
        raise _Usage("no process name: give --as NAME or set MCCS_NAME")
    return Client(args.config, args.name, observe=observe, connect_timeout=1.0, reconnect_timeout=10.0,
                  carry_confirms=carry_confirms)


class _Usage(Exception):
    pass


def _guard(body):
    """Map every failure to the exit codes of docs/DESIGN.md section 8."""
    def run(args) -> int:
        try:
            return body(args)
        except _Usage as e:
            return _fail(EXIT_USAGE, str(e))
        except NotStored as e:
            return _fail(EXIT_NOT_STORED, str(e))
        except (ConfigError, Refused, FileNotFoundError, ValueError) as e:
            return _fail(EXIT_USAGE, str(e))
        except DaemonUnreachable as e:
            return _fail(EXIT_UNREACHABLE, str(e))
        except MCCSError as e:
            return _fail(EXIT_USAGE, str(e))
    return run


@_guard
def run_send(args) -> int:
    if args.file is not None and args.data is not None:
        raise _Usage("give the message as DATA or --file PATH, not both")
    if args.file is not None:
        size = os.path.getsize(args.file)
        if size > MAX_MESSAGE:  # not read at all: no host takes it
            raise _Usage(f"{args.file} has {size:,} bytes; a message has at most {MAX_MESSAGE:,} (max_message)")
        with open(args.file, "rb") as f:
            data = f.read()
    else:
        data = _stdin_or(args.data)
    bar = Progress(f"sending {len(data):,} bytes to {args.to_id}") if args.file and sys.stderr.isatty() else None
    with _client(args) as client:
        msg_id = client.send(args.to_id, data, args.user_id, timeout=args.timeout, ttl=args.ttl,
                             receipt=args.receipt or args.wait_delivered, priority=args.priority,
                             progress=bar.show if bar else None)
        if bar:
            bar.done(f"stored here as MSG_ID {msg_id}")
        print(msg_id, flush=True)
        return wait_delivered(client, args.to_id, msg_id, sys.stderr.isatty()) if args.wait_delivered else EXIT_OK


@_guard
def run_recv(args) -> int:
    """The message is confirmed (taken off RECV_LIST) only once it is written out: if that fails
    it stays, and the daemon hands it again."""
    with _client(args, args.observe, carry_confirms=True) as client:
        msg = client.recv(args.from_id, args.user_id, wait=not args.nowait, timeout=args.timeout)
        if msg is None:
            return _fail(EXIT_NOTHING, "nothing received")
        try:
            _write_out(msg, args)
        except OSError as e:
            client.give_back()
            raise _Usage(f"cannot write message {msg.from_id[:2]}/{msg.msg_id} out ({e}): it stays on RECV_LIST, "
                         "to be received again") from None
    return EXIT_OK


def _write_out(msg: Message, args) -> None:
    if args.out is not None:
        part = f"{args.out}.part"
        try:
            with open(part, "wb") as f:
                f.write(msg.data)
            os.replace(part, args.out)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
    if args.json:
        _print_json(msg, **({"out": args.out, "bytes": len(msg.data)} if args.out is not None else {}))
        sys.stdout.flush()
    elif args.out is None:
        _print_data(msg)


def _print_json(msg: Message, **about) -> None:
    """One object: the message's ids, `ttl` (seconds its sender still waits, if it said), `copy` for
    an observer's copy, `ok` for a reply; and its data (base64, and as text if it is UTF-8)."""
    about = {"from_id": msg.from_id, "to_id": msg.to_id, "msg_id": msg.msg_id, "user_id": msg.user_id,
             **({"ttl": round(max(0.0, msg.deadline - time.monotonic()), 3)} if msg.deadline is not None else {}),
             **({"copy": True} if msg.copy else {}), **({"ok": msg.ok} if msg.reply else {}), "e2e": msg.e2e,
             **about}
    if "out" not in about:
        try:
            text = msg.data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        about.update(data=b64(msg.data), text=text)
    print(json.dumps(about))


def _print_data(msg: Message) -> None:
    sys.stdout.buffer.write(msg.data)
    sys.stdout.flush()


def _stdin_or(data: str | None) -> bytes:
    return sys.stdin.buffer.read() if data in (None, "-") else os.fsencode(data)


@_guard
def run_request(args) -> int:
    with _client(args) as client:
        reply = client.request(args.to_id, _stdin_or(args.data), args.timeout)
    if reply is None:
        return _fail(EXIT_NOTHING, f"no reply within {args.timeout:g} s")
    if args.json:
        _print_json(reply)
    else:
        _print_data(reply)
    return EXIT_OK if reply.ok else EXIT_FAILED


@_guard
def run_reply(args) -> int:
    deadline = None if args.ttl is None else time.monotonic() + args.ttl
    request = Message(args.to_id, "", args.msg_id, 0, b"", deadline=deadline)
    with _client(args) as client:
        msg_id = client.reply(request, _stdin_or(args.data), ok=not args.fail)
    if msg_id is None:
        return _fail(EXIT_NOTHING, "not sent: the request's sender has stopped waiting")
    print(msg_id, flush=True)
    return EXIT_OK


@_guard
def run_ping(args) -> int:
    """Like ping(8): a line per answer, a summary; exit 0 if any answer came, 1 if none."""
    if not args.config:
        raise _Usage("no config: give -c host.toml or set MCCS_CONFIG")
    if args.count < 1:
        raise _Usage(f"--count {args.count}: at least 1")
    rtts: list[float | None] = []
    with Client(args.config, None, connect_timeout=1.0, reconnect_timeout=10.0) as client:
        for i in range(args.count):
            if i:
                time.sleep(max(0.0, 1.0 - (rtts[-1] or 0.0)))
            pong = client.ping(args.target, timeout=args.timeout)
            rtts.append(pong.rtt if pong else None)
            if pong is None:
                print(f"no answer from {args.target[:2]} within {args.timeout:g} s", flush=True)
                continue
            name = args.target[2:].strip()
            attached = f", {name} {'attached' if pong.attached else 'not attached'}" if name else ""
            print(f"answer from {pong.host}: seq={i + 1} time={pong.rtt * 1000:.1f} ms{attached}", flush=True)
    got = [r for r in rtts if r is not None]
    summary = f"{args.count} sent, {len(got)} answered"
    if got:
        summary += f", rtt min/avg/max {min(got) * 1000:.1f}/{sum(got) / len(got) * 1000:.1f}/{max(got) * 1000:.1f} ms"
    print(summary)
    return EXIT_OK if got else EXIT_NOTHING


@_guard
def run_status(args) -> int:
    if not args.config:
        raise _Usage("no config: give -c host.toml or set MCCS_CONFIG")
    if args.watch:
        from mccs.cli.watch import run_watch
        return run_watch(args)
    try:
        with Client(args.config, None, connect_timeout=1.0, grace=args.timeout) as client:
            status = client.status()
    except DaemonUnreachable as e:
        return _status_offline(args, str(e))
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        _print_status(status)
    return EXIT_OK


def _status_offline(args, why: str) -> int:
    """With the daemon down, the checkpoint still tells what is waiting."""
    from checkpoint.store import CheckpointError, read_only_summary
    cfg = load(args.config)
    try:
        lists = read_only_summary(cfg.checkpoint)
    except CheckpointError as e:
        lists, why = None, f"{why}; {e}"
    status = {"host": cfg.id, "daemon": "not running", "error": why, "lists": lists,
              "lines": [{"peer": line.peer, "protocol": line.protocol, "state": "DOWN"} for line in cfg.lines],
              "counters": {}}
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(f"host {cfg.id}: daemon not running ({why})")
        if lists:
            print(f"checkpoint: WAIT_LIST {lists['wait']}  SEND_LIST {lists['send']}  RECV_LIST {lists['recv']}")
    return EXIT_UNREACHABLE


def _print_status(s: dict) -> None:
    lists = s["lists"]
    print(f"host {s['host']}  epoch {s['epoch']}  pid {s['pid']}  up {s['uptime']:.0f} s")
    print(f"WAIT_LIST {lists['wait']}  SEND_LIST {lists['send']}  RECV_LIST {lists['recv']}")
    for line in s["lines"]:
        extra = "  ".join(f"{k} {v}" for k, v in line.items()
                          if k not in ("peer", "protocol", "state", "counters", "transfer", "in_flight"))
        print(f"line {line['peer']} {line['protocol']:5} {line['state']:10} {extra}")
        if line.get("transfer"):
            print(f"  sending {transfer_text(line['transfer'])}")
    for p in s.get("receiving", []):
        print(f"receiving {p['origin']}/{p['msg_id']} for {p['to_id'].rstrip()}: "
              f"{_mib(p['bytes'])} of {_mib(p['total'])}")
    waiting = s.get("waiting_for", {})
    for r in s.get("routes", []):
        distance = "-" if r["distance"] is None else r["distance"]
        print(f"route {r['to']} via {r['via'] or '-'}  distance {distance}  {r['kind']}  age {r['age']:.0f} s"
              f"  waiting {waiting.get(r['to'], 0)}")
    for origin, held in s.get("held_for_order", {}).items():
        print(f"held for order: {held['held']} from {origin}, waiting for its number {held['next']}")
    custody = {k: v for k, v in s.get("custody", {}).items() if v and k != "owed"}
    if custody:  # end-to-end custody (docs/ROUTING.md 5c): copies kept, restores being repaired
        print("custody: " + "  ".join(f"{k} {_custody_text(v)}" for k, v in custody.items()))
    print("counters: " + "  ".join(f"{k} {v}" for k, v in sorted(s["counters"].items())))
    refused = {k[len("refused_"):]: v for k, v in s["counters"].items() if k.startswith("refused_")}
    if refused:  # end to end (docs/E2E.md): by reason
        print("refused: " + "  ".join(f"{k} {v}" for k, v in sorted(refused.items())))


def _custody_text(v: object) -> str:
    if isinstance(v, dict):
        return ",".join(f"{k}:{n}" for k, n in v.items())
    return ",".join(v) if isinstance(v, list) else str(v)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def size_text(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.1f}{unit}"
    return f"{max(0.0, seconds):.0f}s"


def transfer_text(t: dict) -> str:
    """One line for a message going in segments: done of total, rate, time left."""
    eta = "-" if t["eta"] is None else f"{t['eta']:.0f} s"
    return (f"{t['origin']}/{t['msg_id']} to {t['to_id'].rstrip()}: {_mib(t['bytes'])} of {_mib(t['total'])} "
            f"({100 * t['bytes'] / max(1, t['total']):.0f}%)  {t['rate'] / 1000:.1f} kB/s  ETA {eta}")


class Progress:
    """A progress bar on stderr (a terminal), redrawn in place."""
    WIDTH = 30

    def __init__(self, title: str):
        self.title = title

    def show(self, done: int, total: int, note: str = "") -> None:
        filled = self.WIDTH * done // max(1, total)
        sys.stderr.write(f"\r{self.title} [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
                         f"{100 * done // max(1, total):3d}% {note}\033[K")
        sys.stderr.flush()

    def done(self, note: str) -> None:
        sys.stderr.write(f"\r{self.title}: {note}\033[K\n")
        sys.stderr.flush()


def wait_delivered(client: Client, to_id: str, msg_id: int, tty: bool, poll: float = 0.5) -> int:
    """Follow a message sent with a receipt: its transfer on this host's lines while there is one,
    then its notice (delivered: 0; undeliverable: 1)."""
    host = client.host
    bar = Progress(f"delivering MSG_ID {msg_id}") if tty else None
    while True:
        status = client.status()
        # a notice comes from the destination, or an undeliverable one from this host or where its void waited
        hosts = [to_id[:2], host, *(r["to"] for r in status.get("routes", []))]
        notice = client.recv(f"{to_id[:2]}MCCS", msg_id, wait=True, timeout=poll)
        for h in hosts[1:]:
            notice = notice or client.recv(f"{h}MCCS", msg_id, wait=False)
        if notice is not None:
            about = json.loads(notice.data)
            told = describe(about, notice.from_id[:2])
            if bar:
                bar.done(told)
            else:
                print(told, file=sys.stderr)
            return EXIT_OK if about["notice"] == "delivered" else EXIT_NOTHING
        if bar:
            t = next((line["transfer"] for line in status["lines"] if line.get("transfer")
                      and line["transfer"]["origin"] == host and line["transfer"]["msg_id"] == msg_id), None)
            if t is not None:
                bar.show(t["bytes"], t["total"], f"{t['rate'] / 1000:.1f} kB/s  ETA "
                                                 f"{'-' if t['eta'] is None else round(t['eta'])} s")
