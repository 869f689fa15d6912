"""`mccs bench calls --uucp`: Taylor UUCP (`uucico`) calling over the same emulated Hayes modems
(`mccs vserial --modem`) as MCCS's daemons, for the figures side by side.

Two systems, AA and BB, each with its own `config`, spool, public directory, lock directory and
logs in a temporary directory (`-I config`: /etc/uucp and the system spool are not touched). AA's
port is a `modem` port on its end of the line, its dialer the chat `ATZ`, `ATE0V1`, `ATD<BB's
number>`, `CONNECT`, and after the call `+++` between guard times and `ATH0`; then the login chat
(`ogin:`, `word:`) with `call-login` / `call-password`. BB's modem answers by itself (`ATS0=1`); an
answerer thread here starts `uucico -l` on BB's end at each `CONNECT`, which prompts for the
login and checks it against BB's own `passwd` file (no system account).

- **set-up**: from `uucp -r` queueing one 128-byte file on an idle line, then `uucico -S BB`, to
  the file in BB's public directory; the median of the runs.
- **bytes a call**: AA's modem's command phase at its port (the emulator's `command_bytes`:
  commands, escape, echoes and results); and every byte on the line, both ways, of a call that
  carries nothing (`uucico -S BB` with an empty queue): the login chat, UUCP's handshake, the
  protocol's start and close.
- **burst**: `--burst` files of 128 bytes queued, then one call: the seconds from CONNECT to the
  last file in BB's public directory, and the share of them (a) the files' bytes would take at
  the baud and (b) the line from AA to BB was busy (every byte uucico sent).
"""
from __future__ import annotations

import os
import select
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from mccs.testbed.bench_bulk import _give_to_uucp, _kill, found, uucp_system, which
from mccs.testbed.bench_calls import SIZE

SKIPPED = "uucico not installed (apt-get install uucp)"
LOGIN, PASSWORD = "Uaa", "s3cret"
DIALER = ('chat "" ATZ\\r\\c OK ATE0V1\\r\\c OK ATD\\T\\r\\c CONNECT\nchat-timeout 60\n'
          "chat-fail BUSY\nchat-fail NO\\sCARRIER\nchat-fail NO\\sANSWER\nchat-fail NO\\sDIALTONE\n"
          # the escape: a guard time (1 s) of silence before and after +++, then on hook
          'complete-chat "" \\d\\d+++\\d\\d\\c OK ATH0\\r\\c OK\n'
          'abort-chat "" \\d\\d+++\\d\\d\\c OK ATH0\\r\\c OK\ncarrier false\n')
TIMEOUT = 120  # seconds for one call's work


def skipped() -> str | None:
    """Why Taylor UUCP cannot run here; None when it can."""
    return None if which("uucico") and which("uucp") else SKIPPED


def _answerer(port: str, config: Path, connects: list[float], stop: threading.Event) -> None:
    """BB's side: its modem answers by itself; at each CONNECT, `uucico -l` on the port (it
    prompts for the login and password, as a login would), and again when that call ends."""
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
    try:
        os.write(fd, b"ATZ\r")
        time.sleep(0.2)
        os.write(fd, b"ATE0V1S0=1\r")
        seen = b""
        while not stop.is_set():
            try:
                chunk = os.read(fd, 256) if _readable(fd) else b""
            except OSError:
                return
            seen = (seen + chunk)[-64:]
            if b"CONNECT" not in seen:
                continue
            connects.append(time.monotonic())
            seen = b""
            with open(config.parent / "slave.out", "ab") as log:
                slave = subprocess.Popen([found("uucico"), "-I", str(config), "-l", "-D", "-q"],
                                         stdin=fd, stdout=fd, stderr=log)
            try:
                while slave.poll() is None and not stop.is_set():
                    time.sleep(0.05)
            finally:
                _kill(slave)
    finally:
        os.close(fd)


def _readable(fd: int) -> bool:
    """Within 50 ms: the answerer looks at its stop flag as often."""
    return bool(select.select([fd], [], [], 0.05)[0])


class Taylor:
    """AA and BB on one modem line: queue files on AA, make AA call BB, see them arrive."""

    def __init__(self, root: Path, baud: int) -> None:
        from mccs.testbed.vserial import Lines
        self.root, self.baud = root, baud
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        for p in root.parents:  # uucico runs as the uucp user: it must reach the trees
            if str(p).startswith(tempfile.gettempdir() + os.sep):
                os.chmod(p, 0o755)
        self.wire: list[tuple[float, str, int]] = []  # (when, direction, bytes) on the line
        self.tel = Lines(str(root / "tel"), ["AA-BB"], baud=baud, modems=True,
                         log=lambda direction, data, now: self.wire.append((now, direction, len(data))))
        self.connects: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Taylor":
        tel = self.tel.__enter__()
        try:
            self._start(tel)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, tel) -> None:
        """Both systems' configurations, then BB's answerer."""
        for dev in tel.lines["AA-BB"].devices:
            os.chmod(dev, 0o666)
        speed = f"speed {self.baud}\n"
        self.aa = uucp_system(self.root, "AA", "BB",
                              f"port modem\n{speed}phone {tel.number('BB', 'AA')}\nchat ogin: \\L word: \\P\n"
                              f"call-login {LOGIN}\ncall-password {PASSWORD}\n",
                              {"port": f"port modem\ntype modem\ndevice {tel.port('AA', 'BB')}\n{speed}"
                                       "dialer hayes\ncarrier false\nhardflow false\n",
                               "dial": f"dialer hayes\n{DIALER}", "passwd": ""})
        self.bb = uucp_system(self.root, "BB", "AA", f"called-login {LOGIN}\n",
                              {"port": "", "dial": "", "passwd": f"{LOGIN} {PASSWORD}\n"})
        self.outbox = self.root / "outbox"
        self.outbox.mkdir()
        for d in (self.aa, self.bb, self.outbox):
            _give_to_uucp(d)
        self._thread = threading.Thread(target=_answerer, daemon=True, name="uucp answerer",
                                        args=(tel.port("BB", "AA"), self.bb / "config", self.connects, self._stop))
        self._thread.start()
        time.sleep(0.5)  # BB's modem set to answer

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.tel.__exit__(*exc)

    @property
    def modem(self):
        """AA's modem (the caller's)."""
        return self.tel.lines["AA-BB"].modems[0]

    def queue(self, files: dict[str, bytes]) -> None:
        """`uucp -r`: the files wait in AA's spool for BB's public directory; no call yet."""
        for name, data in files.items():
            (self.outbox / name).write_bytes(data)
            os.chmod(self.outbox / name, 0o644)
        q = subprocess.run([found("uucp"), "-I", str(self.aa / "config"), "-C", "-r",
                            *(str(self.outbox / n) for n in files), "BB!~/"], capture_output=True, text=True)
        if q.returncode:
            raise RuntimeError(f"uucp could not queue the files: {q.stderr.strip()}")

    def call(self) -> subprocess.Popen:
        """`uucico -S BB`: AA calls BB now, carries what waits, and hangs up."""
        out = open(self.aa / "master.out", "ab")
        try:
            return subprocess.Popen([found("uucico"), "-I", str(self.aa / "config"), "-D", "-q", "-S", "BB"],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        finally:
            out.close()

    def wait(self, master: subprocess.Popen, names: list[str]) -> float:
        """Until every named file is in BB's public directory and the call is over; when the last came."""
        deadline, last = time.monotonic() + TIMEOUT, None
        try:
            while last is None:
                if all((self.bb / "pub" / n).exists() for n in names):
                    last = time.monotonic()
                elif master.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"uucico ended (rc {master.returncode}) before {len(names)} files "
                                       f"came: {self.log()}")
                else:
                    time.sleep(0.01)
            master.wait(TIMEOUT)
        finally:
            _kill(master)
        return last

    def log(self) -> str:
        return "; ".join(p.read_text(errors="replace")[-300:] for p in (self.aa / "Log", self.bb / "Log") if p.exists())


def measure(root: Path, baud: int, runs: int, burst: int) -> dict:
    """Taylor UUCP's figures, as bench_calls.measure gives MCCS's."""
    out: dict = {"baud": baud, "runs": runs, "burst": burst}
    with Taylor(root, baud) as t:
        setup = []
        for i in range(runs):
            name = f"one{i}"
            data = bytes([65 + i % 26]) * SIZE
            t0 = time.monotonic()
            t.queue({name: data})
            setup.append(t.wait(t.call(), [name]) - t0)
            if (t.bb / "pub" / name).read_bytes() != data:
                raise RuntimeError(f"{name} differs from the file sent")
        calls, modem_bytes = t.modem.counters["calls"], t.modem.counters["command_bytes"]
        before = len(t.wire)
        t.wait(t.call(), [])  # a call that carries nothing: its sign-on and sign-off alone
        empty = sum(n for _, _, n in t.wire[before:])
        files = {f"burst{i:03d}": bytes([i % 256]) * SIZE for i in range(burst)}
        t.queue(files)
        last = t.wait(t.call(), list(files))
        connect = t.connects[-1]
        if any((t.bb / "pub" / n).read_bytes() != d for n, d in files.items()):
            raise RuntimeError("a file of the burst differs from the file sent")
        protocol = next((line.split("'")[1] for line in reversed((t.aa / "Log").read_text().splitlines())
                         if "Handshake successful" in line), "?")
    seconds = last - connect
    sent = sum(n for when, d, n in t.wire if d == "a>b" and connect <= when <= last)
    out.update({
        "setup_delivery_s": statistics.median(setup), "setup_runs": [round(x, 3) for x in setup],
        "modem_bytes_per_call": modem_bytes / max(1, calls), "empty_call_line_bytes": empty,
        "protocol": protocol, "burst_connected_s": round(seconds, 3),
        "burst_payload_share": round(burst * SIZE * 10 / baud / seconds, 4),
        "burst_line_bytes": sent, "burst_line_share": round(sent * 10 / baud / seconds, 4),
    })
    return out


def side_by_side(result: dict) -> list[str]:
    """The table of `mccs bench calls --uucp`: MCCS's figures (result) and Taylor UUCP's (result["uucp"])."""
    u = result["uucp"]
    if "skipped" in u or "failed" in u:
        return [f"  Taylor UUCP: {', '.join(f'{k}: {v}' for k, v in u.items())}"]
    rows = [
        ("SEND (uucp -r + uucico -S) to delivery on an idle line, call included",
         f"{result['setup_delivery_s']:.2f} s", f"{u['setup_delivery_s']:.2f} s"),
        ("modem command phase a call at the caller's port (emulator)", f"{result['modem_port_bytes_per_call']:.0f} B",
         f"{u['modem_bytes_per_call']:.0f} B"),
        ("sign-on: MCCS S/T/V frames; UUCP a whole empty call, both ways",
         f"{result['signon_bytes_per_call']:.0f} B", f"{u['empty_call_line_bytes']} B"),
        (f"burst of {result['burst']} x {SIZE} B: CONNECT to last delivery", f"{result['burst_connected_s']:.1f} s",
         f"{u['burst_connected_s']:.1f} s"),
        ("  share carrying the payload (bytes x 10 / baud)", f"{result['burst_payload_share']:.1%}",
         f"{u['burst_payload_share']:.1%}"),
        ("  share the line A>B was busy (MCCS: data frames; UUCP: all bytes)", f"{result['burst_data_share']:.1%}",
         f"{u['burst_line_share']:.1%}"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"  {'':{width}}  {'MCCS':>8}  {'UUCP ' + u['protocol']:>8}"]
    lines += [f"  {a:{width}}  {b:>8}  {c:>8}" for a, b, c in rows]
    return lines


def compare(root: Path, baud: int, runs: int, burst: int) -> dict:
    """measure() where uucico is installed; otherwise, or when UUCP fails, why not (MCCS's figures stand)."""
    why = skipped()
    if why:
        return {"skipped": why}
    try:
        return measure(root, baud, runs, burst)
    except RuntimeError as e:
        return {"failed": str(e)}



