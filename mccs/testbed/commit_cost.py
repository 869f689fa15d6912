"""What the durable commits of a message cost the CPU, apart from the rest of a daemon's work.

Two hosts in memory (mccs.testbed.hostsim: the daemon's core and driver, SQLite in memory) pass
`count` messages over a line paced at 115200 baud, one a SEND and one a RECV and its confirm, as
the CPU part of `mccs bench network` does with real daemons. Then each host's passes are committed
again, in order, to a checkpoint on disk (the daemon's store, checkpoint.store.Checkpoint), once with
synchronous=FULL, the daemon's, and once with NORMAL: the CPU those commits take (user and system
time of this thread) is what the checkpoint costs a message, without the asyncio loop, the socket,
the traces or the core. A py-spy profile misses most of it: SQLite works with the GIL released.
"""
from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path

from checkpoint.store import Checkpoint
from mccs.config import LineConfig
from mccs.core.lines import LineState
from mccs.testbed.hostsim import SimNet

BAUD = 115200
HOSTS = ("AA", "BB")


def _run_pair(directory: Path, protocol: str, count: int, size: int) -> tuple[SimNet, dict[str, int]]:
    """The pair after `count` messages; for each host, how many of its passes came before the first."""
    net = SimNet(directory, {a: [LineConfig(peer=b, port=f"sim://{b}", baud=BAUD, protocol=protocol, role=role)]
                             for a, b, role in (("AA", "BB", "primary"), ("BB", "AA", "secondary"))})
    for ch in net.channels.values():
        ch.ab.imp.baud = ch.ba.imp.baud = BAUD
    sender, receiver = net.client("AA", "CS"), net.client("BB", "CR")
    assert net.run(lambda: all(net[h].kernel.lines[p].state is LineState.UP for h, p in (HOSTS, HOSTS[::-1])),
                   duration=30), "the simulated line did not come up"
    start = {h: len(net[h].passes) for h in HOSTS}
    data = base64.b64encode(bytes(size)).decode()
    send = {"op": "send", "to": "BBCR", "data": data}
    sent, got = 1, 0
    srid, rrid, confirming = sender.request(send), receiver.request({"op": "recv", "timeout": 60}), False
    while got < count:
        if net.now > 3600:
            raise RuntimeError(f"only {got} of {count} messages arrived")
        net.step()
        if sent < count and sender.reply(srid) is not None:
            srid, sent = sender.request(send), sent + 1
        reply = receiver.reply(rrid)
        if reply is None:
            continue
        if confirming:  # a message taken: the next RECV
            got += 1
        elif reply.get("msg"):  # a message handed: its confirm (a RECV that timed out is asked again)
            rrid, confirming = receiver.request({"op": "confirm", "rid": reply["msg"]["rid"]}), True
            continue
        rrid, confirming = receiver.request({"op": "recv", "timeout": 60}), False
    return net, start


def commit_cost(protocol: str = "async", count: int = 2000, size: int = 128) -> dict:
    """For each host: its commits a message, and the CPU µs a message those commits take on disk with
    synchronous=FULL and NORMAL (keys commits_per_msg_sim_AA, commit_cpu_us_full_AA, ...)."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="mccs-commits-") as name:
        root = Path(name)
        net, start = _run_pair(root / "sim", protocol, count, size)
        for host in HOSTS:
            passes = net[host].passes
            setup = [fx.changes for fx in passes[:start[host]] if fx.changes]  # sign-on and the like: not timed
            timed = [fx.changes for fx in passes[start[host]:] if fx.changes]
            out[f"commits_per_msg_sim_{host}"] = len(timed) / count
            for sync in ("full", "normal"):
                cp = Checkpoint(root / f"{host}-{sync}.db", host, sync)
                for changes in setup:
                    cp.apply(changes)
                cpu0 = time.thread_time()
                for changes in timed:
                    cp.apply(changes)
                out[f"commit_cpu_us_{sync}_{host}"] = 1e6 * (time.thread_time() - cpu0) / count
                cp.close()
    return out
