"""`mccs daemon -c host.toml`: a host's daemon in the foreground."""
from __future__ import annotations

import argparse
import logging
import sys

from checkpoint.store import CheckpointError

from .config import ConfigError, load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", required=True, help="the host's TOML configuration")
    p.add_argument("--new-checkpoint", action="store_true",
                   help="start this host with an empty checkpoint: only where none exists or the file is empty "
                        "(leftover WAL files are renamed aside, never read); a first start with no file needs "
                        "no flag")
    p.epilog = ("Exit codes: 0 stopped by SIGTERM or Ctrl-C; 2 bad config, unusable checkpoint, or the socket "
                "is served by another daemon; 70 internal error (repeated failed passes; the checkpoint is intact).")


def run(args: argparse.Namespace) -> int:
    from .daemon import Daemon
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("mccs").setLevel(logging.INFO)
    try:
        cfg = load(args.config)
        return Daemon(cfg, new_checkpoint=args.new_checkpoint).run()
    except (ConfigError, CheckpointError, OSError) as e:
        print(f"mccs daemon: {e}", file=sys.stderr)
        return 2
