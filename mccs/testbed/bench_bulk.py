"""`mccs bench bulk` (issue 12): one bulk transfer, MCCS against ZMODEM and Taylor UUCP.

The same seeded random payload (default 1 MiB) goes one way over the same kind of vserial line
(`mccs.testbed.vserial_line.Line`: pty pairs joined by a relay paced at the baud, 8N1, and bit
errors at `--ber` from the same seed, so every peer meets the same damage per byte sent) with:

- async  MCCS, two `mccs daemon` processes on an async line; one message (`[host] max_message`
         = the payload), SEND on AA until RECV on BB has all of it;
- bsc    the same over a BSC line (primary AA, secondary BB): one message, in segments of 32
         blocks (multi-block ETB ... ETX transmissions); beside its stop-and-wait ceiling (bytes
         only), the floor of the relay itself: the same blocks and replies exchanged bare
         (mccs.testbed.bench_floor);
- zmodem `sz -b` / `rz -b -y` from lrzsz, on the two ends of the line; from rz's start (sz only
         waits for it before) until sz exits; the received file is compared;
- uucp   Taylor UUCP `uucico` on both ends, protocol 'i', window 16, 1,024-byte packets; the
         master's Stats line (bytes and seconds of the file transfer); the file is compared.

Efficiency is payload bytes a second / (baud / 10), the line's capacity in bytes a second.
MCCS's line is up before its clock starts, as UUCP's is (its Stats time starts after the
handshake) and ZMODEM's session start is a few short frames. Peers whose programs are missing
are skipped with the command that installs them; this benchmark installs nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PEERS = ("async", "bsc", "zmodem", "uucp")
MIB = 1 << 20
INSTALL = "sudo apt-get install lrzsz uucp"
SBIN = ("/usr/sbin", "/usr/lib/uucp", "/sbin")  # uucico is not on a user's PATH in Debian
UUCP_WINDOW, UUCP_PACKET = 16, 1024
# Targets (issue 12)
CLEAN_ASYNC = 0.98  # of capacity, clean line, every baud
NOISY_BAUD = 115200
ASYNC_OVER_UUCP = 1.05  # with bit errors at 115200
ASYNC_OVER_ZMODEM = 3.0
BSC_POINTS = 0.03  # clean: within 3 points of the stop-and-wait ceiling of its block size
class PeerFailed(RuntimeError):
    """One transfer did not complete (or completed wrong)."""


# ---- what is installed -----------------------------------------------------------------------
def which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path=os.pathsep.join(SBIN))


def found(program: str) -> str:
    """which(), for a peer's program: a peer runs only when missing() found its programs."""
    path = which(program)
    assert path is not None, f"{program} not found"
    return path


def missing(peer: str) -> str | None:
    """Why `peer` cannot run here, with what installs it; None when it can."""
    if peer == "zmodem":
        gone = [p for p in ("sz", "rz") if not which(p)]
        return f"{' and '.join(gone)} not found: install lrzsz ({INSTALL})" if gone else None
    if peer == "uucp":
        gone = [p for p in ("uucico", "uucp") if not which(p)]
        return f"{' and '.join(gone)} not found: install uucp ({INSTALL})" if gone else None
    return None


# ---- a paced line ----------------------------------------------------------------------------
def _line(directory: Path, baud: int, ber: float, seed: int):
    from mccs.testbed.vserial_line import Line
    directory.mkdir(parents=True, exist_ok=True)
    return Line(str(directory / "AA.BB"), str(directory / "BB.AA"), baud=baud, ber=ber, seed=seed)


def _deadline(size: int, baud: int) -> float:
    """Seconds after which a transfer is given up: 6 x the time at full capacity, + 2 minutes."""
    return 6 * size * 10 / baud + 120


def _kill(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


# ---- MCCS ------------------------------------------------------------------------------------
def mccs_transfer(protocol: str, root: Path, data: bytes, baud: int, ber: float, seed: int,
                  message: int, line_keys: dict, e2e: str = "off") -> float:
    """Seconds from the SEND of `data` on AA (cut into messages of `message` bytes; 0: one
    message) until BB's process has received all of it, between two daemon processes."""
    from mccs.config import ConfigError
    from mccs.testbed.hosts import DaemonProcess, give_keys, write_config
    message = message or len(data)
    chunks = [data[i:i + message] for i in range(0, len(data), message)] or [b""]
    with _line(root / "dev", baud, ber, seed) as line:
        keys = {"protocol": protocol, "baud": baud, **line_keys}
        max_message = max(128, message)
        try:
            configs = [write_config(root, "AA", [{"peer": "BB", "port": line.end_a, "role": "primary", **keys}],
                                    max_message=max_message, e2e=e2e),
                       write_config(root, "BB", [{"peer": "AA", "port": line.end_b, "role": "secondary", **keys}],
                                    max_message=max_message, e2e=e2e)]
            if e2e != "off":  # both ends keyed, each trusting the other (docs/E2E.md)
                give_keys(configs)
            a, b = DaemonProcess(configs[0]), DaemonProcess(configs[1])
        except ConfigError as e:
            raise PeerFailed(f"this build does not take the configuration: {e}"
                             + (" (messages this large need large-message support; --mccs-message N sends "
                                "the payload as N-byte messages)" if "max_message" in str(e) else "")) from None
        try:
            return _mccs_run(a, b, chunks, data, baud)
        except PeerFailed:
            raise
        except Exception as e:  # noqa: BLE001 - a daemon or client error, with what the daemons logged
            tails = " | ".join(f"{d.cfg.id}: {d.log_tail(300).strip()[-300:]}" for d in (a, b))
            raise PeerFailed(f"{type(e).__name__}: {e} (daemon logs: {tails})") from None


def _mccs_run(a, b, chunks: list[bytes], data: bytes, baud: int) -> float:
    """Start both daemons, wait for the line, SEND every chunk on AA and RECV them on BB."""
    import mccs
    with a, b:
        _wait_up(a, 60)
        failure: list[BaseException] = []

        def send_all(s) -> None:
            try:
                for chunk in chunks:
                    s.send("BBBULK", chunk)
            except BaseException as e:  # noqa: BLE001 - reported by the receiver
                failure.append(e)

        with mccs.connect(b.config, "BULK") as r, mccs.connect(a.config, "BSND") as s:
            sender = threading.Thread(target=send_all, args=(s,), daemon=True)
            t0 = time.monotonic()
            sender.start()
            got: list[bytes] = []
            until = t0 + _deadline(len(data), baud)
            while len(got) < len(chunks):
                msg = r.recv(timeout=min(5.0, max(0.0, until - time.monotonic())))
                if msg is not None:
                    got.append(msg.data)
                elif failure:
                    raise PeerFailed(f"SEND failed: {failure[0]!r}")
                elif time.monotonic() >= until:
                    raise PeerFailed(f"{len(got)} of {len(chunks)} messages arrived in "
                                     f"{until - t0:.0f} s")
            seconds = time.monotonic() - t0
            sender.join(10)
    if b"".join(got) != data:
        raise PeerFailed("the data received differ from the data sent")
    return seconds


def _wait_up(d, timeout: float) -> None:
    import mccs
    with mccs.connect(d.config, None) as c:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(line["state"] == "UP" for line in c.status()["lines"]):
                return
            time.sleep(0.05)
    raise PeerFailed(f"the line did not come up within {timeout:.0f} s")


def bsc_ceiling(data: bytes, line_keys: dict) -> tuple[int, float, int, float]:
    """(block_size, mean wire bytes of a full block, reply bytes, stop-and-wait ceiling): the
    best fraction of capacity a BSC line can carry when every block waits for its ACK0/ACK1;
    the bid, its reply and the EOT are spent once per transmission and left out."""
    from linedrivers.bsc_codes import CODE_SETS
    from mccs.config import LineConfig
    block_size = int(line_keys.get("block_size", LineConfig.block_size))
    cs = CODE_SETS[line_keys.get("code", LineConfig.code)]
    sample = data[:64 * block_size] if len(data) >= 2 * block_size else random.Random(0).randbytes(64 * block_size)
    full = [len(b) for b in cs.blocks(sample, block_size)[:-1]]  # the last may be short
    frame = statistics.mean(full)
    reply = len(cs.sequence("ACK0"))
    return block_size, round(frame, 2), reply, round(block_size / (frame + reply), 4)


# ---- ZMODEM ----------------------------------------------------------------------------------
def zmodem_transfer(root: Path, data: bytes, baud: int, ber: float, seed: int) -> float:
    """`sz -b` on AA's end, `rz -b -y` on BB's 0.3 s later; seconds from rz's start to sz's exit."""
    src, dst = root / "send", root / "recv"
    src.mkdir(parents=True)
    dst.mkdir()
    (src / "BULK").write_bytes(data)
    sz = rz = None
    with _line(root / "dev", baud, ber, seed) as line, open(line.end_a, "r+b", buffering=0) as a, \
            open(line.end_b, "r+b", buffering=0) as b, open(root / "sz.log", "wb") as szlog, \
            open(root / "rz.log", "wb") as rzlog:
        try:
            sz = subprocess.Popen([found("sz"), "-b", "BULK"], stdin=a, stdout=a, stderr=szlog, cwd=src)
            time.sleep(0.3)
            t0 = time.monotonic()
            rz = subprocess.Popen([found("rz"), "-b", "-y"], stdin=b, stdout=b, stderr=rzlog, cwd=dst)
            try:
                rc = sz.wait(_deadline(len(data), baud))
            except subprocess.TimeoutExpired:
                raise PeerFailed(f"sz did not finish in {_deadline(len(data), baud):.0f} s") from None
            seconds = time.monotonic() - t0
            try:
                rz.wait(5)  # rz may linger after the file is complete
            except subprocess.TimeoutExpired:
                pass
        finally:
            _kill(sz)
            _kill(rz)
    if rc != 0:
        raise PeerFailed(f"sz exited with {rc}: {(root / 'sz.log').read_text(errors='replace')[-300:]}")
    got = dst / "BULK"
    if not got.exists() or got.read_bytes() != data:
        raise PeerFailed("rz's file differs from the file sent")
    return seconds


# ---- Taylor UUCP 'i' -------------------------------------------------------------------------
def uucp_system(root: Path, name: str, other: str, sys_entry: str, files: dict[str, str]) -> Path:
    """One Taylor UUCP system's trees and files under root/name (nothing of the host's own /etc/uucp):
    its `sys` file names `other` with `sys_entry`; `files` are its port, dial and passwd files by
    kind, each named in its `config` (which `uucico -I` is given)."""
    d = root / name
    for sub in ("spool", "pub", "lock"):
        (d / sub).mkdir(parents=True)
    named = "".join(f"{kind}file {d}/{kind}\n" for kind in files)
    (d / "config").write_text(f"nodename {name}\nspool {d}/spool\npubdir {d}/pub\nlockdir {d}/lock\n"
                              f"logfile {d}/Log\nstatfile {d}/Stats\ndebugfile {d}/Debug\nsysfile {d}/sys\n{named}")
    (d / "sys").write_text(f"system {other}\ntime any\nlocal-send /\nlocal-receive /\nremote-send /\n"
                           f"remote-receive /\n{sys_entry}")
    for kind, text in files.items():
        (d / kind).write_text(text)
    return d


def _uucp_side(root: Path, name: str, other: str, device: str, baud: int, master: bool) -> Path:
    return uucp_system(root, name, other,
                       f"port bench\nspeed {baud}\nchat \"\"\nprotocol i\n"
                       f"protocol-parameter i window {UUCP_WINDOW}\nprotocol-parameter i packet-size {UUCP_PACKET}\n"
                       + ("" if master else "called-login ANY\n"),
                       {"port": f"port bench\ntype direct\ndevice {device}\nspeed {baud}\n"})


def _give_to_uucp(path: Path) -> None:
    """uucico runs setuid uucp: its trees are the uucp user's when we may chown (root), and
    open to everyone otherwise (directories 1777, files 666)."""
    for p in [path, *path.rglob("*")]:
        os.chmod(p, 0o1777 if p.is_dir() else 0o666)
        try:
            shutil.chown(p, user="uucp")
        except (PermissionError, LookupError, OSError):
            pass


STATS = re.compile(r"sent (\d+) bytes in ([\d.]+) seconds")


def uucp_transfer(root: Path, data: bytes, baud: int, ber: float, seed: int) -> float:
    """Queue the file on alpha (AA's end) for beta, call with `uucico -S beta`, start the slave
    `uucico` on BB's end 1 s later; the seconds of the master's Stats line."""
    os.chmod(root, 0o755)
    for p in root.parents:  # uucp must reach the trees (mkdtemp makes them 0700)
        if str(p).startswith(tempfile.gettempdir() + os.sep):
            os.chmod(p, 0o755)
    master = slave = None
    with _line(root / "dev", baud, ber, seed) as line:
        for dev in line.devices:
            os.chmod(dev, 0o666)
        a = _uucp_side(root, "alpha", "beta", line.end_a, baud, True)
        b = _uucp_side(root, "beta", "alpha", line.end_b, baud, False)
        (root / "BULK").write_bytes(data)
        for d in (a, b):
            _give_to_uucp(d)
        os.chmod(root / "BULK", 0o644)
        q = subprocess.run([found("uucp"), "-I", f"{a}/config", "-C", "-r", str(root / "BULK"), "beta!~/BULK"],
                           capture_output=True, text=True)
        if q.returncode:
            raise PeerFailed(f"uucp could not queue the file: {q.stderr.strip()}")
        try:
            with open(root / "master.out", "wb") as out:
                master = subprocess.Popen([found("uucico"), "-I", f"{a}/config", "-D", "-q", "-S", "beta"],
                                          stdout=out, stderr=out, stdin=subprocess.DEVNULL)
            time.sleep(1)
            with open(line.end_b, "r+b", buffering=0) as port:
                slave = subprocess.Popen([found("uucico"), "-I", f"{b}/config", "-D", "-q"],
                                         stdin=port, stdout=port, stderr=subprocess.DEVNULL)
            try:
                rc = master.wait(_deadline(len(data), baud))
            except subprocess.TimeoutExpired:
                raise PeerFailed(f"uucico did not finish in {_deadline(len(data), baud):.0f} s") from None
            try:
                slave.wait(3)
            except subprocess.TimeoutExpired:
                pass
        finally:
            _kill(master)
            _kill(slave)
    stats = (a / "Stats").read_text(errors="replace") if (a / "Stats").exists() else ""
    m = STATS.search(stats)
    got = b / "pub" / "BULK"
    if rc != 0 or not m or int(m.group(1)) != len(data):
        log = (a / "Log").read_text(errors="replace")[-400:] if (a / "Log").exists() else ""
        raise PeerFailed(f"uucico exited with {rc}; Stats {stats.strip()!r}; log: {log}")
    if not got.exists() or got.read_bytes() != data:
        raise PeerFailed("the file uucico delivered differs from the file sent")
    return float(m.group(2))


# ---- the benchmark ---------------------------------------------------------------------------
@dataclass
class Result:
    peer: str
    baud: int
    ber: float
    size: int
    seconds: list = field(default_factory=list)  # one per completed run
    errors: list = field(default_factory=list)
    bytes_per_s: float | None = None  # median
    efficiency: float | None = None  # bytes_per_s / (baud / 10)
    skipped: str | None = None  # why it did not run
    messages: int = 1  # MCCS: the messages the payload went in


def mccs_message(size: int, asked: int) -> int:
    """Bytes per MCCS message: --mccs-message, else the whole payload."""
    return min(asked, size) if asked else size


def measure(peer: str, root: Path, data: bytes, baud: int, ber: float, seed: int, args) -> float:
    if peer in ("async", "bsc"):
        message = mccs_message(len(data), args.mccs_message)
        return mccs_transfer(peer, root, data, baud, ber, seed, message, args.line_keys, args.e2e)
    return (zmodem_transfer if peer == "zmodem" else uucp_transfer)(root, data, baud, ber, seed)


def targets(results: list[Result], bsc: tuple | None) -> list[dict]:
    """Every target of issue 12 that the results can judge: what, the figure, the goal, met."""
    by = {(r.peer, r.baud, r.ber): r.efficiency for r in results}
    out = []
    for (peer, baud, ber), eff in by.items():
        if peer == "async" and ber == 0 and eff is not None:
            out.append({"target": f"clean {baud}: async >= {CLEAN_ASYNC:.0%} of capacity", "value": eff,
                        "goal": CLEAN_ASYNC, "met": eff >= CLEAN_ASYNC})
        if peer == "async" and ber > 0 and baud == NOISY_BAUD and eff is not None:
            for other, factor in (("uucp", ASYNC_OVER_UUCP), ("zmodem", ASYNC_OVER_ZMODEM)):
                if theirs := by.get((other, baud, ber)):
                    ratio = eff / theirs
                    out.append({"target": f"ber {ber:g} {baud}: async >= {factor:g} x {other}",
                                "value": round(ratio, 3), "goal": factor, "met": ratio >= factor})
        if peer == "bsc" and ber == 0 and eff is not None and bsc:
            goal = round(bsc[3] - BSC_POINTS, 4)
            out.append({"target": f"clean {baud}: bsc within {BSC_POINTS * 100:.0f} points of its stop-and-wait "
                                  f"ceiling {bsc[3]:.1%} (block {bsc[0]})", "value": eff, "goal": goal,
                        "met": eff >= goal})
    return out


def ratios(results: list[Result]) -> list[dict]:
    """MCCS's efficiency over each peer's, per setting."""
    by = {(r.peer, r.baud, r.ber): r.efficiency for r in results}
    out = []
    for (peer, baud, ber), eff in by.items():
        if peer in ("async", "bsc") and eff:
            for other in ("zmodem", "uucp"):
                if theirs := by.get((other, baud, ber)):
                    out.append({"mccs": peer, "peer": other, "baud": baud, "ber": ber,
                                "ratio": round(eff / theirs, 3)})
    return out


def machine() -> dict:
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu or platform.processor(), "python": platform.python_version(),
            "host": platform.node()}


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]i?[bB]?)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1048576, 64K, 1M)")
    unit = (m.group(2) or "").upper()[:1]
    return int(m.group(1)) * {"": 1, "K": 1024, "M": MIB}[unit]


def _line_key(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--line-key {text!r}: expected KEY=VALUE")
    for cast in (int, float):
        try:
            return key.strip(), cast(value)
        except ValueError:
            pass
    return key.strip(), {"true": True, "false": False}.get(value.lower(), value)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.description = (
        "One bulk transfer of the same seeded random payload over the same paced vserial line, in one\n"
        "run, with MCCS async and BSC (two daemon processes, one message), ZMODEM (sz/rz from lrzsz)\n"
        "and Taylor UUCP protocol 'i' (uucico from uucp, window 16, 1,024-byte packets), clean and with\n"
        "bit errors. Efficiency = payload bytes a second / (baud / 10). Targets (issue 12): clean, async\n"
        f">= {CLEAN_ASYNC:.0%} of capacity at every baud; with bit errors at {NOISY_BAUD}, async >= "
        f"{ASYNC_OVER_UUCP:g} x UUCP 'i' and\n>= {ASYNC_OVER_ZMODEM:g} x ZMODEM; clean, BSC within "
        f"{BSC_POINTS * 100:.0f} points of its stop-and-wait ceiling for its block size (shown beside the\n"
        "relay's own floor: the same blocks and replies exchanged bare, about 5 s a baud).\n"
        f"Installs nothing: a peer whose programs are missing is skipped ({INSTALL}).\n"
        "Time: 1 MiB takes ~91 s a transfer at 115200 baud and ~18 min at 9600 (more with errors; ZMODEM\n"
        "with errors several times that): use --size for shorter runs. Exit status 1 when a target is missed.")
    p.epilog = ("examples:\n"
                "  mccs bench bulk --baud 115200                       # 1 MiB, clean and ber 1e-5\n"
                "  mccs bench bulk --baud 9600 --size 128K --runs 3\n"
                "  mccs bench bulk --peers zmodem,uucp --size 64K --ber 0 --json")
    p.add_argument("--baud", action="append", metavar="BAUD[,BAUD]",
                   help="line speed(s), repeatable or comma-separated (default 9600 and 115200)")
    p.add_argument("--ber", type=float, default=1e-5,
                   help="bit-error rate of the noisy runs (default 1e-5, about one byte in 10,000 damaged); "
                        "0: clean runs only")
    p.add_argument("--size", type=_size, default=MIB, help="payload bytes, with K or M suffixes (default 1M)")
    p.add_argument("--runs", type=int, default=1, help="runs per setting; medians are reported (default 1)")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {','.join(PEERS)} (default all)")
    p.add_argument("--seed", type=int, default=12, help="seed of the payload and of the line's bit errors")
    p.add_argument("--mccs-message", type=_size, default=0,
                   help="send the payload as messages of this many bytes (default 0: one message)")
    p.add_argument("--line-key", dest="line_keys", type=_line_key, action="append", default=[],
                   metavar="KEY=VALUE", help="a [[line]] key for both MCCS daemons, e.g. window=16 or "
                                             "block_size=1024 (repeatable)")
    p.add_argument("--e2e", choices=("off", "sign", "seal"), default="off",
                   help="the MCCS daemons protect the payload end to end (docs/E2E.md); default off")
    p.add_argument("--json", action="store_true", help="print the results as one JSON document")


def _bauds(values: list[str] | None) -> list[int]:
    if not values:
        return [9600, 115200]
    return [int(b) for v in values for b in v.split(",") if b.strip()]


def run(args: argparse.Namespace) -> int:
    try:
        bauds = _bauds(args.baud)
    except ValueError:
        print(f"mccs bench bulk: bad --baud {args.baud!r}", file=sys.stderr)
        return 2
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if unknown or not peers or args.runs < 1 or args.size < 1:
        print(f"mccs bench bulk: unknown peer {unknown[0]!r} (known: {', '.join(PEERS)})" if unknown
              else "mccs bench bulk: --peers, --runs and --size must not be empty or zero", file=sys.stderr)
        return 2
    args.line_keys = dict(args.line_keys) if isinstance(args.line_keys, list) else args.line_keys
    say = (lambda *a, **k: print(*a, **k, file=sys.stderr, flush=True)) if args.json else \
        (lambda *a, **k: print(*a, **k, flush=True))
    skipped = {p: why for p in peers if (why := missing(p))}
    for p, why in skipped.items():
        say(f"skipping {p}: {why}")
    data = random.Random(args.seed).randbytes(args.size)
    bers = [0.0] + ([args.ber] if args.ber > 0 else [])
    settings = [(baud, ber) for baud in bauds for ber in bers]
    results = {(p, baud, ber): Result(p, baud, ber, args.size, skipped=skipped.get(p),
                                      messages=-(-args.size // mccs_message(args.size, args.mccs_message))
                                      if p in ("async", "bsc") else 1)
               for baud, ber in settings for p in peers}
    active = [p for p in peers if p not in skipped]
    say(f"mccs bench bulk: {args.size:,} bytes, bauds {', '.join(map(str, bauds))}, ber "
        f"{' and '.join(f'{b:g}' for b in bers)}, peers {', '.join(active) or 'none'}, {args.runs} run(s)")
    with tempfile.TemporaryDirectory(prefix="mccs-bench-bulk-") as tmp:
        for baud, ber in settings:
            for i in range(args.runs):
                order = active[i % len(active):] + active[:i % len(active)] if active else []  # none always first
                for peer in order:
                    r = results[(peer, baud, ber)]
                    root = Path(tmp) / f"{peer}-{baud}-{ber:g}-{i}"
                    root.mkdir()
                    try:
                        s = measure(peer, root, data, baud, ber, args.seed + i, args)
                        r.seconds.append(round(s, 3))
                        say(f"  {baud:>6} ber {ber:<6g} {peer:<7} run {i + 1}: {s:8.2f} s  "
                            f"{args.size / s / (baud / 10):6.1%} of capacity")
                    except Exception as e:  # noqa: BLE001 - one peer's failure is a result, not the end
                        why = str(e) if isinstance(e, PeerFailed) else f"{type(e).__name__}: {e}"
                        r.errors.append(why)
                        say(f"  {baud:>6} ber {ber:<6g} {peer:<7} run {i + 1}: FAILED: {why}")
                    finally:
                        shutil.rmtree(root, ignore_errors=True)
        from mccs.testbed.bench_floor import floor
        bsc = bsc_ceiling(data, args.line_keys) if "bsc" in active else None
        floors = {baud: round(floor(Path(tmp) / f"floor-{baud}", baud, round(bsc[1]), bsc[2], bsc[0]), 4)
                  for baud in bauds} if bsc else {}
    for r in results.values():
        if r.seconds:
            r.bytes_per_s = round(args.size / statistics.median(r.seconds), 1)
            r.efficiency = round(r.bytes_per_s / (r.baud / 10), 4)
    res = list(results.values())
    judged = targets(res, bsc)
    rat = ratios(res)
    doc = {"size": args.size, "bauds": bauds, "bers": bers, "runs": args.runs, "seed": args.seed,
           "mccs_message": {p: mccs_message(args.size, args.mccs_message) for p in ("async", "bsc")},
           "line_keys": args.line_keys,
           "uucp": {"protocol": "i", "window": UUCP_WINDOW, "packet": UUCP_PACKET},
           "bsc_ceiling": None if bsc is None else dict(zip(("block_size", "frame_bytes", "reply_bytes", "ceiling"),
                                                            bsc)),
           "bsc_floor": floors,
           "machine": machine(), "results": [asdict(r) for r in res], "ratios": rat, "targets": judged,
           "skipped": skipped}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _table(doc)
    return 1 if any(t["met"] is False for t in judged) else 0


def _table(doc: dict) -> None:
    m = doc["machine"]
    print(f"\nmccs bench bulk: {doc['size']:,} bytes of seeded random data, one transfer each, median of "
          f"{doc['runs']} ({m['nproc']} cores, {m['cpu']}, Python {m['python']})")
    print(f"{'baud':>7} {'ber':>7} {'peer':<7} {'seconds':>9} {'B/s':>9} {'efficiency':>10}")
    for r in doc["results"]:
        if r["skipped"]:
            print(f"{r['baud']:>7} {r['ber']:>7g} {r['peer']:<7} skipped: {r['skipped']}")
        elif r["efficiency"] is None:
            print(f"{r['baud']:>7} {r['ber']:>7g} {r['peer']:<7} FAILED: {r['errors'][-1][:100]}")
        else:
            sec = statistics.median(r["seconds"])
            print(f"{r['baud']:>7} {r['ber']:>7g} {r['peer']:<7} {sec:>9.2f} {r['bytes_per_s']:>9.1f} "
                  f"{r['efficiency']:>10.1%}" + (f"  ({len(r['errors'])} failed)" if r["errors"] else "")
                  + (f"  in {r['messages']} messages" if r["messages"] > 1 else ""))
    if doc["bsc_ceiling"]:
        c = doc["bsc_ceiling"]
        print(f"BSC stop-and-wait ceiling: block {c['block_size']} B / ({c['frame_bytes']} B on the wire + "
              f"{c['reply_bytes']} B reply) = {c['ceiling']:.1%} of capacity")
        for baud, eff in doc["bsc_floor"].items():
            print(f"BSC floor of this relay at {baud}: {eff:.1%} (the same blocks and replies exchanged bare, "
                  "no protocol: its turnarounds)")
    if doc["ratios"]:
        print("MCCS over each peer (efficiency ratio):")
        for r in doc["ratios"]:
            print(f"  {r['baud']:>7} ber {r['ber']:<6g} {r['mccs']:<5} / {r['peer']:<6} {r['ratio']:6.2f} x")
    print("targets:")
    for t in doc["targets"]:
        value = f"{t['value']:.2f} x" if " x " in t["target"] else f"{t['value']:.1%}"
        print(f"  {t['target']}: {value} {'met' if t['met'] else 'MISSED'}")
    if not doc["targets"]:
        print("  none judged (a target needs MCCS async or BSC results, and the peer it is measured against)")
