"""`mccs bench local`: durable SEND-to-RECV messages per second through one daemon, against the
raw SQLite commit rate of this machine measured in the same run (WAL, synchronous=FULL, one
small row per commit). The ratio is what group commit buys."""
from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import resource
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from mccs.testbed.hosts import DaemonProcess, write_config
from mccs.testbed.procstat import cpu_seconds


class RawCommits(NamedTuple):
    per_s: float  # commits a second
    cpu_s: float  # CPU seconds (user + system) a commit: the floor of what a durable commit costs here


def raw_commits(path: Path, seconds: float = 2.0) -> RawCommits:
    """Commits of one small row each, WAL + synchronous=FULL, for `seconds`: their rate and the CPU
    each cost this thread (the fsync's share included: it is most of it on a VM)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB)")
    n, t0, cpu0 = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - t0 < seconds:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t (data) VALUES (?)", (b"x" * 64,))
        conn.execute("COMMIT")
        n += 1
    raw = RawCommits(n / (time.perf_counter() - t0), (time.thread_time() - cpu0) / n)
    conn.close()
    return raw


def _sender(config, name, to_id, count, size, batch, start, out):
    """`count` messages, one a SEND, or `batch` a send_many."""
    import mccs
    with mccs.connect(config, name) as c:
        start.wait()
        t0 = time.perf_counter()
        if batch > 1:
            for done in range(0, count, batch):
                c.send_many([(to_id, b"m" * size)] * min(batch, count - done))
        else:
            for i in range(count):
                c.send(to_id, b"m" * size)
        out.put(("send", t0, time.perf_counter()))


def _receiver(config, name, count, batch, start, out):
    """`count` messages, one a RECV, or up to `batch` a recv_many; each RECV carries the confirms
    of the messages before."""
    import mccs
    with mccs.connect(config, name, carry_confirms=True) as c:
        start.wait()
        got = 0
        while got < count:
            n = len(c.recv_many(min(batch, count - got), timeout=120)) if batch > 1 else c.recv(timeout=120) is not None
            if not n:
                break
            got += n
        out.put(("recv", None, time.perf_counter()))


def message_rate(send_config: Path, recv_config: Path, recv_host: str, pairs: int, count: int,
                 size: int = 64, batch: int = 1) -> float:
    """Messages a second from `pairs` sender processes to as many receivers, first SEND to last RECV."""
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_receiver, args=(str(recv_config), f"R{i}", count, batch, start, out))
             for i in range(pairs)]
    procs += [ctx.Process(target=_sender,
                          args=(str(send_config), f"S{i}", f"{recv_host}R{i}", count, size, batch, start, out))
              for i in range(pairs)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    t0 = min(r[1] for r in results if r[0] == "send")
    t1 = max(r[2] for r in results if r[0] == "recv")
    return pairs * count / (t1 - t0)


def _children_cpu() -> float:
    """User + system CPU seconds of the ended child processes (the senders and receivers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pairs", type=int, default=4, help="sending and receiving processes (each)")
    p.add_argument("--messages", type=int, default=2000, help="messages per sender")
    p.add_argument("--runs", type=int, default=3, help="runs; the median is reported")
    p.add_argument("--synchronous", default="full", choices=("full", "normal", "off"))
    p.add_argument("--send-many", type=int, default=1, metavar="N",
                   help="senders send N messages a request (send_many, durable as a whole) and receivers take up "
                        "to N a request (recv_many); 1: one a SEND, one a RECV")


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="mccs-bench-") as name:
        tmp = Path(name)
        rates, raws, batches, daemon_cpu, client_cpu = [], [], [], [], []
        n = args.pairs * args.messages
        for i in range(args.runs):
            raws.append(raw_commits(tmp / f"raw{i}.db").per_s)
            config = write_config(tmp / f"run{i}", "AA", [], synchronous=args.synchronous)
            with DaemonProcess(config) as daemon:
                cpu0, kids0 = cpu_seconds(daemon.pid), _children_cpu()
                rates.append(message_rate(config, config, "AA", args.pairs, args.messages, batch=args.send_many))
                daemon_cpu.append(1e6 * (cpu_seconds(daemon.pid) - cpu0) / n)
                client_cpu.append(1e6 * (_children_cpu() - kids0) / n)
                batches.append(n / daemon.counters()["commits"])
            print(f"run {i + 1}: {rates[-1]:8.0f} msg/s   raw SQLite {raws[-1]:8.0f} commits/s   "
                  f"ratio {rates[-1] / raws[-1]:.2f}   {batches[-1]:.2f} messages a commit   CPU a message: "
                  f"daemon {daemon_cpu[-1]:.0f} us, processes {client_cpu[-1]:.0f} us")
    rate, raw = statistics.median(rates), statistics.median(raws)
    print(f"\nmccs bench local ({platform.node()}, {mp.cpu_count()} cores, Python {platform.python_version()}, "
          f"synchronous={args.synchronous}, {args.pairs}+{args.pairs} processes, "
          f"{args.pairs * args.messages} messages a run, "
          f"{f'send_many of {args.send_many}' if args.send_many > 1 else 'one message a SEND'}, median of {args.runs})")
    print(f"  durable SEND-to-RECV: {rate:8.0f} messages/s")
    print(f"  raw SQLite commits:   {raw:8.0f} commits/s (WAL, synchronous=FULL, one row each)")
    print(f"  ratio:                {statistics.median(r / w for r, w in zip(rates, raws)):8.2f}  "
          "(median of the runs' own ratios; target >= 1.0)")
    print(f"  group commit:         {statistics.median(batches):8.2f} messages a commit "
          "(each message is stored by its SEND, taken off by the confirm its next RECV carries)")
    print(f"  CPU a message:        {statistics.median(daemon_cpu):8.0f} us in the daemon, "
          f"{statistics.median(client_cpu):.0f} us in the sending and receiving processes (user + system)")
    return 0
