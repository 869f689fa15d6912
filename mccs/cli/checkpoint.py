"""`mccs checkpoint backup|check`: care of a host's checkpoint, while its daemon runs or not.

Both only read the checkpoint (a read-only SQLite connection), so they never take the daemon's
lock nor stop it: a WAL reader sees the last commit and the daemon's commits go on meanwhile.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from checkpoint.store import CheckpointError, backup, check

from mccs.config import ConfigError, load

EXIT_OK, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("backup", help="a consistent copy of the checkpoint, taken while the daemon runs",
                       description="Copy the checkpoint (one consistent snapshot, SQLite's VACUUM INTO) to DEST. "
                                   "To restore: stop the daemon, move the checkpoint's -wal and -shm files aside, "
                                   "copy DEST to the checkpoint's path, start the daemon.")
    b.add_argument("dest", metavar="DEST", help="the file to write (refused if it exists, unless --force)")
    b.add_argument("--force", action="store_true", help="replace DEST if it exists")
    _source(b)
    c = sub.add_parser("check", help="integrity, schema version and list counts of a checkpoint",
                       description="Run SQLite's integrity check on a checkpoint and print its host, epoch, "
                                   "schema version and row counts. Exit 0 when fine, 1 when damaged or not a "
                                   "checkpoint, 2 on a usage error.")
    c.add_argument("path", metavar="PATH", nargs="?", help="the checkpoint file (default: the config's)")
    c.add_argument("--quick", action="store_true", help="PRAGMA quick_check: faster, skips index contents")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    _source(c)


def _source(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", default=os.environ.get("MCCS_CONFIG"),
                   help="host TOML config naming the checkpoint (default: $MCCS_CONFIG)")


def _checkpoint_of(args: argparse.Namespace) -> tuple[str, str | None]:
    """The checkpoint's path, and the host id it must belong to when a config names it."""
    if getattr(args, "path", None):
        return args.path, None
    if not args.config:
        raise ConfigError("no checkpoint: give PATH, -c host.toml or set MCCS_CONFIG")
    cfg = load(args.config)
    return cfg.checkpoint, cfg.id


def run(args: argparse.Namespace) -> int:
    try:
        path, host = _checkpoint_of(args)
        if args.action == "backup":
            size = backup(path, args.dest, args.force)
            print(f"backed up {path} to {args.dest} ({size} bytes)")
            return EXIT_OK
        return _check(path, host, args)
    except (ConfigError, FileExistsError) as e:
        print(f"mccs checkpoint: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (CheckpointError, OSError) as e:
        print(f"mccs checkpoint: {e}", file=sys.stderr)
        return EXIT_DAMAGED


def _check(path: str, host: str | None, args: argparse.Namespace) -> int:
    report = check(path, quick=args.quick)
    if host is not None and report.get("host") not in (None, host):
        report["problems"].append(f"belongs to host {report['host']!r}, not {host!r} (the config's)")
    if args.json:
        print(json.dumps(report, indent=2))
    elif "host" in report:
        print(f"checkpoint {path}: host {report.get('host')}, epoch {report.get('epoch')}, "
              f"schema version {report.get('schema_version')}, next MSG_ID {report.get('next_msg_id')}")
        for table, n in report.get("counts", {}).items():
            print(f"  {table:12} {n}")
    if not args.json:
        print(f"{report['check']}: " + ("ok" if not report["problems"] else "FAILED"))
    for problem in report["problems"]:
        print(f"mccs checkpoint: {path}: {problem}", file=sys.stderr)
    return EXIT_DAMAGED if report["problems"] else EXIT_OK
