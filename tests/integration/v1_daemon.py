"""`mccs` whose daemon speaks docs/DESIGN.md's version 1 on its async lines, as an MCCS from before
routing: no FEAT at sign-on (neither ROUTE nor SREJ), no room for a routing envelope. For the mixed-version tests."""
import sys

from linedrivers import AsyncLine
from mccs import cli
from mccs.core import kernel


def v1_machine(host, lc, max_message, epoch="", random_bytes=None):  # a version-1 station sends no EPOCH
    return AsyncLine(host, lc.peer, window=lc.window, keepalive=lc.keepalive, baud=lc.baud, max_message=max_message,
                     reply_timeout=lc.reply_timeout, retry_limit=lc.retry_limit, selective_repeat=False)


if __name__ == "__main__":
    kernel.make_machine = v1_machine
    sys.exit(cli.main())
