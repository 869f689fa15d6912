"""Progress of `mccs analyze` on stderr, printed as `mccs loopback` prints its own: a first line
saying what is done, then lines stamped with the seconds since the start. A Spark job can run for
minutes without a word, so while one runs a thread adds its tasks done each second (Spark's
public status tracker: it counts tasks, not events; the events read are told when the counting
pass is over). Off (a script, a pipe, `--quiet`): nothing is printed and no thread runs.
"""
from __future__ import annotations

import sys
import threading
import time


class Progress:
    def __init__(self, on: bool, poll: float = 1.0):
        self.on, self.poll = on, poll
        self.t0 = time.monotonic()
        self.text = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        if self.on:
            print(text, file=sys.stderr, flush=True)

    def stage(self, text: str) -> None:
        """A new step of the work."""
        self.text = text
        self.say(f"  [{time.monotonic() - self.t0:5.1f} s] {text}")

    def watch(self, spark) -> None:
        """Tell the tasks of the running Spark stage each second until `close()`."""
        if self.on and self._thread is None:
            self._thread = threading.Thread(target=self._tasks, args=(spark.sparkContext.statusTracker(),),
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _tasks(self, tracker) -> None:
        last = None
        while not self._stop.wait(self.poll):
            infos = [i for i in map(tracker.getStageInfo, tracker.getActiveStageIds()) if i is not None]
            done, total = sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)
            if total and (done, total, self.text) != last:
                last = (done, total, self.text)
                self.say(f"  [{time.monotonic() - self.t0:5.1f} s] {self.text}: Spark tasks {done}/{total}")


QUIET = Progress(False)
