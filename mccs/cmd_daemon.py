"""`mccs daemon -c host.toml`: a host's daemon in the foreground."""
from __future__ import annotations

import argparse
import logging
import sys

from checkpoint.store import CheckpointError

from .config import ConfigError, load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", required=True, help="the host's TOML configuration")


def run(args: argparse.Namespace) -> int:
    from .daemon import Daemon
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("mccs").setLevel(logging.INFO)
    try:
        cfg = load(args.config)
        return Daemon(cfg).run()
    except (ConfigError, CheckpointError) as e:
        print(f"mccs daemon: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"mccs daemon: {e}", file=sys.stderr)
        return 2
