"""`mccs keys init|show|trust|rotate|list`: a host's end-to-end key and the hosts it trusts (docs/E2E.md).

A running daemon reads both files again when they change: no restart is needed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from linedrivers.ids import IdError, check_host_id

from mccs.config import ConfigError, HostConfig, load
from mccs.daemon import keys
from mccs.daemon.keys import Entry, KeyFileError

EXIT_OK, EXIT_USAGE = 0, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    init = sub.add_parser("init", help="make this host's key pair ([host] host_key, mode 0600)",
                          description="Make this host's X25519 key pair in [host] host_key (default: ID.key beside "
                                      "the config file), readable by its owner only. Refused if there is one: "
                                      "mccs keys rotate makes a new one.")
    show = sub.add_parser("show", help="print `HOST PUBLIC-KEY`, for another host's `mccs keys trust`",
                          description="Print this host's id and public key on one line: what the operator of "
                                      "another host pastes after `mccs keys trust -c THEIRS.toml`.")
    trust = sub.add_parser("trust", help="trust a host's public key ([host] known_hosts)",
                           description="Add HOST's public key (as its `mccs keys show` prints it) to [host] "
                                       "known_hosts (default: known_hosts beside the config file). A different key "
                                       "for a host already trusted is refused unless --replace; the replaced key "
                                       "is still taken for messages on their way, until [host] ttl has passed.")
    trust.add_argument("host", metavar="HOST", help="the host's id (2 characters)")
    trust.add_argument("key", metavar="KEY", help="its public key (base64)")
    trust.add_argument("--replace", action="store_true", help="replace the key trusted for HOST (it rotated its key)")
    rotate = sub.add_parser("rotate", help="make a new key pair; the old one is kept for messages on their way",
                            description="Make a new key pair. The old one is kept, for messages already on their "
                                        "way, for --keep seconds (default: [host] ttl). Then give the new public "
                                        "key to every host that trusts this one: mccs keys trust --replace.")
    rotate.add_argument("--keep", type=float, default=None, metavar="SECONDS",
                        help="how long the old key is still taken (default: [host] ttl)")
    listing = sub.add_parser("list", help="this host's keys and the hosts it trusts",
                             description="This host's public keys (current and retired) and every trusted key.")
    for q in (init, show, trust, rotate, listing):
        q.add_argument("-c", "--config", default=os.environ.get("MCCS_CONFIG"),
                       help="host TOML config (default: $MCCS_CONFIG)")


def run(args: argparse.Namespace) -> int:
    try:
        if not args.config:
            raise ConfigError("no config: give -c host.toml or set MCCS_CONFIG")
        cfg = load(args.config)
        return ACTIONS[args.action](cfg, args)
    except (ConfigError, KeyFileError) as e:
        print(f"mccs keys: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"mccs keys: {e.filename or ''}: {e.strerror}", file=sys.stderr)
        return EXIT_USAGE


def _init(cfg: HostConfig, args: argparse.Namespace) -> int:
    if os.path.exists(cfg.host_key):
        raise KeyFileError(f"{cfg.host_key}: {cfg.id} has a key already (mccs keys rotate makes a new one)")
    keys.write_own(cfg.host_key, [Entry("", keys.new_private())])
    print(f"made {cfg.host_key}; give this line to the hosts that will trust {cfg.id}:", file=sys.stderr)
    return _show(cfg, args)


def _show(cfg: HostConfig, args: argparse.Namespace) -> int:
    current = keys.read_own(cfg.host_key)[0]
    print(f"{cfg.id} {keys.encode(keys.public_of(current.key))}")
    return EXIT_OK


def _trust(cfg: HostConfig, args: argparse.Namespace) -> int:
    try:
        host = check_host_id(args.host)
    except IdError as e:
        raise KeyFileError(f"HOST {args.host!r}: {e}") from None
    key = keys.decode(args.key, "KEY")
    entries = keys.read_trusted(cfg.known_hosts)
    now = time.time()
    entries = [e for e in entries if not e.until or e.until > now]  # replaced keys whose time has passed go
    current = next((e for e in entries if e.host == host and not e.until), None)
    if current is not None and current.key == key:
        print(f"{host}'s key is trusted already", file=sys.stderr)
        return EXIT_OK
    if current is not None:
        if not args.replace:
            raise KeyFileError(f"{host} has another key in {cfg.known_hosts}: if {host} rotated its key, run again "
                               "with --replace; if not, someone may be posing as it")
        current.until = now + cfg.ttl
    entries = [e for e in entries if not (e.host == host and e.key == key)] + [Entry(host, key)]
    keys.write_trusted(cfg.known_hosts, entries)
    print(f"{cfg.id} now trusts {host} {keys.encode(key)}" + (" (the old key until its messages' ttl)"
                                                             if current else ""), file=sys.stderr)
    return EXIT_OK


def _rotate(cfg: HostConfig, args: argparse.Namespace) -> int:
    old = keys.read_own(cfg.host_key)
    now = time.time()
    keep = cfg.ttl if args.keep is None else args.keep
    old[0].until = now + keep
    kept = [e for e in old if e.until > now]
    keys.write_own(cfg.host_key, [Entry("", keys.new_private()), *kept])
    print(f"new key made; the old one is kept {keep:.0f} s for messages on their way. On every host that "
          f"trusts {cfg.id}: mccs keys trust --replace, with:", file=sys.stderr)
    return _show(cfg, args)


def _list(cfg: HostConfig, args: argparse.Namespace) -> int:
    if os.path.exists(cfg.host_key):
        for e in keys.read_own(cfg.host_key):
            print(f"{cfg.id} {keys.encode(keys.public_of(e.key))} " + (_until(e) if e.until else "current (own)"))
    for e in keys.read_trusted(cfg.known_hosts):
        print(f"{e.host} {keys.encode(e.key)} " + (_until(e) if e.until else "trusted"))
    return EXIT_OK


def _until(e: Entry) -> str:
    return "retired, taken until " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.until))


ACTIONS = {"init": _init, "show": _show, "trust": _trust, "rotate": _rotate, "list": _list}
