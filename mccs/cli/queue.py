"""`mccs queue`: the messages on a host's lists, and the operator's hold, release and purge.

Through the daemon's socket while it runs (its changes are committed like any other); `list`
and `show` read the checkpoint file when it is down, and say so.
"""
from __future__ import annotations

import argparse
import json
import re
import time

from mccs.client import Client, DaemonUnreachable
from mccs.cli.client import (EXIT_OK, EXIT_UNREACHABLE, _fail, _guard, _Usage, age_text, operator_options,
                             size_text)
from mccs.config import load
from mccs.core.requests import LIST_MAX, RequestError, check_host, parse_ref

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
ID_HELP = "ORIGIN/MSG_ID (e.g. AA/12), a MSG_ID of this host's own, or #SEQ as 'mccs queue list' shows it"


def duration(text: str) -> float:
    """`90`, `90s`, `30m`, `2h`, `1d12h`, `1w`: seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw]?)", text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give e.g. 90s, 30m, 2h, 1d12h or 1w")
    return sum(float(n) * UNITS[u or "s"] for n, u in parts)


def _ref(text: str) -> str:
    try:
        parse_ref(text)
    except RequestError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _host(text: str) -> str:
    if not check_host(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host id (2 printable characters, no blank)")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"ID: {ID_HELP}."
    options = operator_options()
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", parents=[options], help="every message on SEND_LIST, RECV_LIST and WAIT_LIST "
                                                             "(read from the checkpoint if the daemon is down)")
    listing.add_argument("--limit", type=int, default=LIST_MAX, metavar="N",
                         help=f"at most N entries (default and most: {LIST_MAX:,})")
    for action, text in (("show", "all about one message"),
                         ("hold", "no line takes it (or any more of it) until released; survives restarts"),
                         ("release", "a held message goes on (a purge waiting for its line is called off)")):
        sub.add_parser(action, parents=[options], help=text).add_argument("id", metavar="ID", type=_ref, help=ID_HELP)
    purge = sub.add_parser("purge", parents=[options], help="take messages off the lists; each sender gets an "
                                                            "undeliverable notice")
    purge.add_argument("id", metavar="ID", type=_ref, nargs="?", help=ID_HELP)
    purge.add_argument("--to", type=_host, metavar="HOST", help="every message for this host")
    purge.add_argument("--older-than", type=duration, metavar="DURATION",
                       help="every message stored here longer ago than this (90s, 30m, 2h, 1d)")


@_guard
def run(args) -> int:
    if not args.config:
        raise _Usage("no config: give -c host.toml or set MCCS_CONFIG")
    keys = {"msg": args.id} if getattr(args, "id", None) else {}
    if args.action == "list":
        if not 1 <= args.limit <= LIST_MAX:
            raise _Usage(f"--limit {args.limit} is not within 1..{LIST_MAX}")
        keys["limit"] = args.limit
    if args.action == "purge":
        if (args.id is None) == (args.to is None and args.older_than is None):
            raise _Usage("purge takes one ID, or --to HOST and/or --older-than DURATION")
        keys.update({k: v for k, v in (("to", args.to), ("older_than", args.older_than)) if v is not None})
    try:
        with Client(args.config, None, connect_timeout=1.0, reconnect_timeout=1.0, grace=args.timeout) as client:
            reply = client.queue(args.action, **keys)
    except DaemonUnreachable as e:
        if args.action not in ("list", "show"):
            return _fail(EXIT_UNREACHABLE, f"{e}; {args.action} goes through the running daemon "
                                           "(list and show read the checkpoint while it is down)")
        reply = _from_checkpoint(args, keys)
    if args.json:
        print(json.dumps(reply, indent=2))
    else:
        _print(args.action, reply)
    return EXIT_OK


def _from_checkpoint(args, keys: dict) -> dict:
    from checkpoint.store import CheckpointError, read_only_lists
    from mccs.core.queue import details, from_checkpoint, select
    cfg = load(args.config)
    try:
        found = from_checkpoint(read_only_lists(cfg.checkpoint), time.time())
    except CheckpointError as e:
        raise _Usage(f"the daemon is not running, and {e}") from None
    reply = {"ok": True, "host": cfg.id, "source": f"checkpoint {cfg.checkpoint}"}
    if args.action == "list":
        return {**reply, "entries": [e for e, _ in found[:keys["limit"]]], "more": max(0, len(found) - keys["limit"])}
    entry, item = select(parse_ref(keys["msg"]), cfg.id, found)
    return {**reply, "entry": details(item, entry)}


def _print(action: str, reply: dict) -> None:
    if "source" in reply:
        print(f"host {reply['host']}: the daemon is not running; read from the {reply['source']} "
              "(as last committed: nothing is in flight)")
    if action == "list":
        _print_list(reply)
    elif action == "show":
        for key, value in reply["entry"].items():
            print(f"{key:8} {_field(key, value)}")
    elif action in ("hold", "release"):
        e = reply["entry"]
        print(f"{e['id']} ({e['list']}, {size_text(e['size'])} to {e['to']}): {e['state']}"
              + (f"; {reply['note']}" if reply["note"] else ""))
    else:
        for key, verb in (("purged", "purged"), ("pending", "purging (its piece on the line comes back first)")):
            for ident in reply[key]:
                print(f"{ident}: {verb}")
        for skip in reply["skipped"]:
            print(f"{skip['id']}: not purged: {skip['why']}")
        if not any(reply[k] for k in ("purged", "pending", "skipped")):
            print("nothing to purge")


def _print_list(reply: dict) -> None:
    entries = reply["entries"]
    if not entries:
        print(f"host {reply['host']}: no messages on SEND_LIST, RECV_LIST or WAIT_LIST")
        return
    rows = [("ID", "SEQ", "LIST", "FROM", "TO", "SIZE", "AGE", "STATE")]
    rows += [(e["id"], str(e["seq"] or "-"), e["list"], e["from"], e["to"], size_text(e["size"]), age_text(e["age"]),
              e["state"] + (f" ({e['kind']})" if e["kind"] else "")) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) if i in (1, 5, 6) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
              .rstrip())
    if reply["more"]:
        print(f"... and {reply['more']:,} more (--limit N shows more)")


def _field(key: str, value) -> str:
    if value is None or value == "":
        return "-"
    if key == "size":
        return size_text(value)
    if key == "age":
        return age_text(value)
    if key in ("stored", "expires"):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    return str(value)
