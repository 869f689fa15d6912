"""`mccs daemon -c host.toml`: a host's daemon in the foreground."""
from __future__ import annotations

import argparse
import logging
import sys

from checkpoint.store import CheckpointError

from mccs.config import ConfigError, load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", required=True, help="the host's TOML configuration")
    p.add_argument("--new-checkpoint", action="store_true",
                   help="start this host with an empty checkpoint: only where none exists or the file is empty "
                        "(leftover WAL files are renamed aside, never read); a first start with no file needs "
                        "no flag")
    p.add_argument("--check", action="store_true",
                   help="do not start: check the config, the socket and trace directories, the checkpoint "
                        "(SQLite quick_check, read-only) and each line's port (exists, is a character device this "
                        "user may read and write, opens with its settings; one held by a running daemon is left "
                        "alone); exit 0 when all is well, 2 otherwise")
    p.epilog = ("Exit codes: 0 stopped by SIGTERM or Ctrl-C (or --check found nothing wrong); 2 bad config, "
                "unusable checkpoint, the socket is served by another daemon, or a --check failed; 70 internal "
                "error (repeated failed passes; the checkpoint is intact). Under systemd (Type=notify) the "
                "daemon says READY=1 once its socket listens.")


def run(args: argparse.Namespace) -> int:
    from mccs.daemon.shell import Daemon
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("mccs").setLevel(logging.INFO)
    try:
        cfg = load(args.config)
        if args.check:
            return _check(cfg)
        return Daemon(cfg, new_checkpoint=args.new_checkpoint).run()
    except (ConfigError, CheckpointError, OSError) as e:
        print(f"mccs daemon: {e}", file=sys.stderr)
        return 2


def _check(cfg) -> int:
    from mccs.daemon.preflight import run_checks
    findings = run_checks(cfg)
    for f in findings:
        print(f"{'ok  ' if f.ok else 'FAIL'}  {f.what}: {f.detail}", file=sys.stdout if f.ok else sys.stderr)
    failed = sum(not f.ok for f in findings)
    print(f"mccs daemon --check: {failed} problem(s)" if failed else "mccs daemon --check: all good")
    return 2 if failed else 0
