"""The pyserial port layer: one serial line, opened in the background and kept open.

A line's port can fail at any time (a USB adapter pulled, the other end of a pty closed,
a socket dropped), and a daemon must outlive that: SerialPort opens the port on its own
thread, retrying with exponential back-off, reads without busy-waiting (or, given an event
loop, lets the loop read a native port itself and only waits for its loss), writes without
ever blocking the caller (straight to a native port when nothing waits before the bytes and
the port takes them, else from a queue on its own thread), and when the port is lost reports
it and reopens. A port with modem lines (a real serial port; a pty or a URL has none) can have DTR
set, and with `on_carrier` its DCD is watched: a change is reported from the reader thread.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import queue
import select
import struct
import termios
import threading
import time
from collections.abc import Mapping
from typing import Callable, TypedDict

import serial

from .wire import char_time

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.1
READ_TIMEOUT = 0.1  # the reader's longest sleep when cancel_read is not available
STABLE = 1.0  # a port open this long resets the back-off
DETACH_WAIT = 2.0  # the longest a lost port waits for the loop to stop reading it
GATHER_MIN = 0.002  # gather(): a shorter wait is not worth taking the port off the loop
GATHER_MAX = 0.1  # gather(): the longest the loop leaves arriving bytes in the kernel's buffer (a hold's batch)
READ_SIZE = 4096  # the most a read takes (as much as a tty's line discipline holds)
CARRIER_POLL = 0.2  # seconds between two looks at DCD (pyserial cannot wait for a modem line's change)


class PortSettings(TypedDict):
    """A SerialPort's settings, as pyserial names them (its apply_settings() takes them)."""
    baudrate: int
    bytesize: int
    parity: str
    stopbits: float
    rtscts: bool
    xonxoff: bool


def open_port(url: str, settings: Mapping[str, object], exclusive: bool = True) -> serial.SerialBase:
    """A pyserial port or URL opened with `settings`; `exclusive`: an flock on a native port, so
    two programs never share one. Raises serial.SerialException (an OSError or ValueError inside)."""
    port = serial.serial_for_url(url, do_not_open=True)
    port.apply_settings(settings)
    port.timeout = READ_TIMEOUT
    if exclusive and isinstance(port, serial.Serial):  # native ports only: socket:// and loop:// lack it
        port.exclusive = True
    port.open()
    return port


class _Lost(threading.Event):
    """Set, with the reason, when the loop's reading of a port ends."""
    reason = ""

    def set(self, reason: str = "") -> None:
        if not self.is_set():
            self.reason = reason
        super().set()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _native_fd(port: serial.SerialBase) -> int | None:
    """The descriptor of a posix serial.Serial; URL ports (socket://, loop://) have none."""
    fd = getattr(port, "fd", None)
    return fd if isinstance(fd, int) and isinstance(getattr(port, "pipe_abort_read_r", None), int) else None


def has_modem_lines(port: serial.SerialBase) -> bool:
    """The port has modem control lines (TIOCMGET works): a real serial port, not a pty or a URL."""
    fd = _native_fd(port)
    if fd is None:
        return False
    try:
        fcntl.ioctl(fd, termios.TIOCMGET, struct.pack("I", 0))
    except OSError:
        return False
    return True


def _read_some(port: serial.SerialBase) -> bytes:
    """What the port has, after waiting up to READ_TIMEOUT. A native port is read straight from
    its descriptor: one select and one read a wake-up, where pyserial's read(1), in_waiting and
    read(n) cost three times the CPU, for every few bytes a line delivers (BENCHMARKS.md)."""
    fd = _native_fd(port)
    if fd is None:  # URL ports: pyserial's own way
        data = port.read(1)  # blocks up to READ_TIMEOUT
        waiting = port.in_waiting if data else 0
        return data + port.read(waiting) if waiting else data
    abort = port.pipe_abort_read_r
    ready, _, _ = select.select([fd, abort], [], [], READ_TIMEOUT)
    if abort in ready:  # cancel_read() from close()
        os.read(abort, 1000)
        return b""
    if not ready:
        return b""
    try:
        data = os.read(fd, READ_SIZE)
    except (BlockingIOError, InterruptedError):
        return b""
    if not data:  # readable but empty, as pyserial reports it: the device is gone
        raise serial.SerialException("device reports readiness to read but returned no data")
    return data


class SerialPort:
    """One serial port by pyserial name or URL; see the module docstring.

    on_data(data, now) and raw_hook("rx", data, now) run on the reader thread, or with `loop` given
    on that event loop (which reads a native port itself); raw_hook("tx", data,
    now) on the thread that wrote the bytes, on_state(open, reason) on the reader thread. `now` is
    time.monotonic().
    """

    def __init__(self, url: str, *, baudrate: int = 9600, bytesize: int = 8, parity: str = "N",
                 stopbits: float = 1, rtscts: bool = False, xonxoff: bool = False,
                 on_data: Callable[[bytes, float], None],
                 on_state: Callable[[bool, str], None] | None = None,
                 raw_hook: Callable[[str, bytes, float], None] | None = None,
                 on_carrier: Callable[[bool], None] | None = None,
                 backoff_max: float = 60.0, exclusive: bool = True,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.url = url
        self.loop = loop
        self.settings = PortSettings(baudrate=baudrate, bytesize=bytesize, parity=parity, stopbits=stopbits,
                                     rtscts=rtscts, xonxoff=xonxoff)
        self.exclusive = exclusive
        self.on_data, self.on_state, self.raw_hook, self.on_carrier = on_data, on_state, raw_hook, on_carrier
        self.modem_lines = False  # the open port has DTR and DCD (set before on_state says it is open)
        self._carrier: bool | None = None  # DCD as last reported
        self.backoff_max = max(backoff_max, BACKOFF_MIN)
        self.counters = dict.fromkeys(("opens", "open_failures", "losses", "bytes_in", "bytes_out",
                                       "dropped_out"), 0)
        self.last_error = ""
        self._port: serial.SerialBase | None = None
        self._lock = threading.Lock()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._queued = 0  # writes in _out or being written by the writer thread (under _lock)
        self._stop = threading.Event()
        self._write_error = ""
        self._generation = 0  # bumped at every open: bytes queued for a lost port are dropped
        self._threads: list[threading.Thread] = []
        self._lost = _Lost()  # the loop's reading of the open port ended (loop mode)
        self._loop_fd: int | None = None  # the descriptor the loop reads (only the loop changes it)
        self._detached = False  # close(), on the loop, took the port off it
        self._gathering: asyncio.TimerHandle | None = None  # gather(): when the loop reads again
        self._paused = False  # gather(): the port's epoll waits for no input meanwhile
        self._poller: select.epoll | None = None  # holds the port's descriptor; the loop watches it

    @property
    def is_open(self) -> bool:
        return self._port is not None

    def start(self) -> "SerialPort":
        """Open in the background (retrying with back-off) and start the reader and writer."""
        self._threads = [threading.Thread(target=self._reader, name=f"port rx {self.url}", daemon=True),
                         threading.Thread(target=self._writer, name=f"port tx {self.url}", daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def write(self, data: bytes) -> None:
        """Send bytes; never blocks. While the port is closed they are dropped. With nothing
        queued before them, what a native port takes at once is written here: a stop-and-wait
        line waits for every answer, and a hand-over to the writer thread costs it each time."""
        if not data:
            return
        if self._port is None:
            self.counters["dropped_out"] += len(data)
            return
        with self._lock:
            if not self._queued:
                data = self._write_now(data)
            if data:
                self._queued += 1
                self._out.put((self._generation, bytes(data)))

    def _write_now(self, data: bytes) -> bytes:
        """Write what the port's non-blocking descriptor takes (under _lock); return the rest."""
        fd = _native_fd(self._port)
        if fd is None:
            return data
        try:
            n = os.write(fd, data)
        except OSError:  # full (BlockingIOError) or failing: the writer thread tries and reports
            return data
        self.counters["bytes_out"] += n
        if self.raw_hook:
            self.raw_hook("tx", bytes(data[:n]), time.monotonic())
        return data[n:]

    def close(self) -> None:
        """Stop both threads and close the port."""
        self._stop.set()
        if self.loop is not None and _running_loop() is self.loop:
            self._detach()  # the reader thread cannot ask the loop while close() holds it
            self._detached = True
        self._out.put(None)
        if self._threads:
            self._threads[1].join(timeout=1.0)  # let queued bytes (a sign-off) leave first
        self._cancel()
        for t in self._threads:
            t.join()
        self._threads = []

    def __enter__(self) -> "SerialPort":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- opening ------------------------------------------------------------------------------
    def _open(self) -> serial.SerialBase:
        return open_port(self.url, self.settings, self.exclusive)

    def _reader(self) -> None:
        """Open, read until the port is lost, report, back off, and again, until close()."""
        delay = BACKOFF_MIN
        while not self._stop.is_set():
            try:
                port = self._open()
            except (serial.SerialException, OSError, ValueError) as e:
                self.counters["open_failures"] += 1
                if str(e) != self.last_error:
                    log.warning("%s: cannot open: %s (retrying)", self.url, e)
                self.last_error = str(e)
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff_max)
                continue
            opened = time.monotonic()
            self._write_error = ""
            with self._lock:
                self._generation += 1
                self._port = port
            self.modem_lines, self._carrier = has_modem_lines(port), None
            self.counters["opens"] += 1
            log.info("%s: open", self.url)
            self._notify(True, "open")
            reason = self._read_until_lost(port)
            with self._lock:
                self._port = None
            self._close_port(port)
            if self._stop.is_set():
                break
            self.counters["losses"] += 1
            self.last_error = reason
            log.warning("%s: lost: %s", self.url, reason)
            self._notify(False, reason)
            if time.monotonic() - opened >= STABLE:
                delay = BACKOFF_MIN
            self._stop.wait(delay)
            delay = min(delay * 2, self.backoff_max)

    def _notify(self, is_open: bool, reason: str) -> None:
        if self.on_state:
            try:
                self.on_state(is_open, reason)
            except Exception:
                log.exception("%s: on_state failed", self.url)

    # ---- reading ------------------------------------------------------------------------------
    def _read_until_lost(self, port: serial.SerialBase) -> str:
        """Deliver bytes until close() or an error; return why the port was lost."""
        fd = _native_fd(port)
        if self.loop is not None and fd is not None:
            return self._read_on_loop(fd)
        while not self._stop.is_set():
            if self._write_error:
                return self._write_error
            try:
                data = _read_some(port)
                self._watch_carrier(port)
            except (serial.SerialException, OSError) as e:
                return f"read failed: {e}"
            except TypeError:  # pyserial on a port closed by close() from another thread
                return "closed"
            if data and self.loop is not None:  # a URL port with a loop: on_data runs on the loop
                try:
                    self.loop.call_soon_threadsafe(self._deliver, data, time.monotonic())
                except RuntimeError:  # the loop is closed: the daemon is ending
                    return "closed"
            elif data:
                self._deliver(data, time.monotonic())
        return "closed"

    def _read_on_loop(self, fd: int) -> str:
        """Let the loop read the port while this thread waits for its loss: a chunk then wakes
        only the loop, not this thread and then the loop (about 0.1 ms less on every turnaround
        of a stop-and-wait line, and less CPU; BENCHMARKS.md)."""
        assert self.loop is not None  # loop mode: _read_until_lost comes here only with a loop
        lost = self._lost = _Lost()
        if self._stop.is_set() or self._write_error:  # _cancel() came before `lost` was there
            lost.set(self._write_error or "closed")
        try:
            self.loop.call_soon_threadsafe(self._attach, fd, lost)
        except RuntimeError:  # the loop is closed: the daemon is ending
            return "closed"
        while not lost.wait(CARRIER_POLL if self.on_carrier and self.modem_lines else None):
            try:  # (set by _readable, or by _cancel(): close(), a failed write)
                self._watch_carrier(self._port)
            except (serial.SerialException, OSError) as e:
                lost.set(f"modem lines failed: {e}")
        if not self._detached:  # off the loop before the descriptor is closed (and maybe reused)
            done = threading.Event()

            def detach() -> None:
                self._detach()
                done.set()
            try:
                self.loop.call_soon_threadsafe(detach)
            except RuntimeError:  # closed: it reads nothing any more
                return "closed"
            done.wait(DETACH_WAIT)
        return self._write_error or lost.reason or "closed"

    def _attach(self, fd: int, lost: "_Lost") -> None:
        """The loop watches an epoll of the port's own: gather() pauses and resumes the port there,
        one system call each, instead of taking it off the loop and putting it back (8 to 17% of a
        receiving daemon's CPU on a streaming line, BENCHMARKS.md)."""
        assert self.loop is not None  # scheduled on the loop by _read_on_loop
        if lost.is_set() or self._stop.is_set():
            return
        self._loop_fd = fd
        self._poller = select.epoll()
        self._poller.register(fd, select.EPOLLIN)
        self.loop.add_reader(self._poller.fileno(), self._readable, fd, lost)

    def gather(self, nbytes: int) -> None:
        """On the loop: let `nbytes` more arrive before on_data runs again, since the line's
        machine knows nothing can happen before them (a frame whose header told its length) and a
        port hands a frame over every few bytes otherwise. Only in loop mode; nothing is lost by it:
        the loop reads again once that many bytes have had time to come at the baud (at most
        GATHER_MAX later, and never more than half a read's worth: the bytes of one wait fit one
        read, and what comes during it the next), and takes what is there."""
        if self._loop_fd is None or self._gathering is not None or nbytes <= 1:
            return
        assert self.loop is not None and self._poller is not None  # loop mode, attached (_loop_fd set)
        s = self.settings
        nbytes = min(nbytes, READ_SIZE // 2)
        wait = min(nbytes * char_time(s["baudrate"], s["bytesize"], s["parity"], s["stopbits"]), GATHER_MAX)
        if wait >= GATHER_MIN:
            if not self._paused:
                self._poller.modify(self._loop_fd, 0)  # a hang-up or an error still wakes the loop
                self._paused = True
            self._gathering = self.loop.call_later(wait, self._gathered, self._loop_fd, self._lost)

    def _gathered(self, fd: int, lost: "_Lost") -> None:
        """The wait is over: read what came now, not in another turn of the loop, and watch the port
        again only if on_data did not ask to gather more (a streaming peer's next frame): one turn
        of the loop and no system call a frame instead of three."""
        self._gathering = None
        if self._loop_fd != fd or lost.is_set():
            return
        self._readable(fd, lost, polled=False)
        if self._gathering is None and self._loop_fd == fd and not lost.is_set():
            assert self._poller is not None  # set with _loop_fd (_attach)
            self._poller.modify(fd, select.EPOLLIN)
            self._paused = False

    def _detach(self) -> None:
        if self._gathering is not None:
            self._gathering.cancel()
            self._gathering = None
        if self._loop_fd is not None:
            assert self.loop is not None and self._poller is not None  # set with _loop_fd (_attach)
            self.loop.remove_reader(self._poller.fileno())
            self._poller.close()
            self._loop_fd = self._poller = None
            self._paused = False

    def _readable(self, fd: int, lost: "_Lost", polled: bool = True) -> None:
        """On the loop: what the port has, to on_data; an error, or an empty read when the port was
        `polled` readable, loses it (a serial port in raw mode reads nothing when nothing came: a
        gather's read that finds nothing leaves a hang-up to the loop's next poll)."""
        try:
            data = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            data, why = b"", f"read failed: {e}"
        else:
            if not data and not polled:
                return
            why = "device reports readiness to read but returned no data"
        if not data:
            self._detach()
            lost.set(why)
            return
        self._deliver(data, time.monotonic())

    def _watch_carrier(self, port: serial.SerialBase | None) -> None:
        """Tell on_carrier when DCD changed (its first level after an open too)."""
        if not (self.on_carrier and self.modem_lines and port is not None):
            return
        cd = bool(port.cd)
        if cd != self._carrier:
            self._carrier = cd
            try:
                self.on_carrier(cd)
            except Exception:
                log.exception("%s: on_carrier failed", self.url)

    def set_dtr(self, level: bool) -> None:
        """Set DTR once the bytes written before have left the port (a sign-off before a hang-up),
        on the writer thread, which waits for them (a port without modem lines: nothing); never blocks."""
        with self._lock:
            if self._port is None or not self.modem_lines:
                return
            self._queued += 1
            self._out.put((self._generation, level))

    def _dtr(self, port: serial.SerialBase, level: bool) -> None:
        """On the writer thread: drain the output (tcdrain), then set DTR."""
        try:
            port.flush()
            port.dtr = level
        except (serial.SerialException, OSError, TypeError, AttributeError) as e:  # (closed meanwhile: see _write_out)
            log.warning("%s: cannot set DTR: %s", self.url, e)

    def _deliver(self, data: bytes, now: float) -> None:
        self.counters["bytes_in"] += len(data)
        if self.raw_hook:
            self.raw_hook("rx", data, now)
        try:
            self.on_data(data, now)
        except Exception:
            log.exception("%s: on_data failed", self.url)

    # ---- writing ------------------------------------------------------------------------------
    def _writer(self) -> None:
        while True:
            items = [self._out.get()]
            while items[-1] is not None:  # coalesce what is queued into one write
                try:
                    items.append(self._out.get_nowait())
                except queue.Empty:
                    break
            closing = items[-1] is None  # close(): write what came before it, then stop
            self._write_items(items[:-1] if closing else items)
            with self._lock:
                self._queued -= len(items) - closing
            if closing:
                return

    def _write_items(self, items: list[tuple[int, bytes | bool]]) -> None:
        """Bytes, written together, and DTR levels (set_dtr) between them, in order."""
        chunk: list[tuple[int, bytes]] = []
        for generation, item in items:
            if isinstance(item, bool):
                self._write_out(chunk)
                chunk = []
                with self._lock:
                    port = self._port if generation == self._generation else None
                if port is not None:
                    self._dtr(port, item)
            else:
                chunk.append((generation, item))
        self._write_out(chunk)

    def _write_out(self, items: list[tuple[int, bytes]]) -> None:
        with self._lock:
            port, generation = self._port, self._generation
        data = b"".join(d for g, d in items if g == generation and port is not None)
        self.counters["dropped_out"] += sum(len(d) for _, d in items) - len(data)
        if not data or port is None:  # no port: nothing was taken into data
            return
        try:
            port.write(data)
        except (serial.SerialException, OSError, TypeError, AttributeError) as e:
            self.counters["dropped_out"] += len(data)
            if not self._stop.is_set() and port is self._port and not self._write_error:
                self._write_error = f"write failed: {e}"
                self._cancel()
            return
        self.counters["bytes_out"] += len(data)
        if self.raw_hook:
            self.raw_hook("tx", data, time.monotonic())

    def _cancel(self) -> None:
        """Wake a reader blocked in read() (or waiting while the loop reads) and a writer blocked
        in write()."""
        self._lost.set(self._write_error or "closed")
        with self._lock:
            port = self._port
            if port is None:
                return
            for name in ("cancel_read", "cancel_write"):
                try:
                    getattr(port, name, lambda: None)()
                except (OSError, serial.SerialException):
                    pass

    @staticmethod
    def _close_port(port: serial.SerialBase) -> None:
        try:
            port.close()
        except (serial.SerialException, OSError):
            pass
