"""When a line that is a call may call: its schedule's windows, in local time (docs/CALLS.md).

    "Mo-Fr 22:00-06:00"   Monday to Friday from 22:00, each until 06:00 the next morning
    "Sa-Su"               all of Saturday and Sunday
    "Mo,We,Fr 08:00-09:30"
    "12:00-13:00"         every day

Days are Mo Tu We Th Fr Sa Su, one, a range or a list; a window that ends at or before its start
runs past midnight into the next day. Pure: a datetime in, an answer out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

DAYS = ("Mo", "Tu", "We", "Th", "Fr", "Sa", "Su")
DAY_MINUTES = 24 * 60
WINDOW = re.compile(r"^\s*(?:(?P<days>[A-Za-z][A-Za-z,\-]*)\s*)?(?:(?P<start>\d\d?:\d\d)-(?P<end>\d\d?:\d\d))?\s*$")


class ScheduleError(ValueError):
    pass


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # 0 Monday .. 6 Sunday: the days it begins on
    start: int  # minute of the day
    end: int  # minute of the day it ends (exclusive); at or before `start`: the next day's

    def open(self, day: int, minute: int) -> bool:
        if self.start < self.end:
            return day in self.days and self.start <= minute < self.end
        return (day in self.days and minute >= self.start) or ((day - 1) % 7 in self.days and minute < self.end)


def parse(text: str) -> Window:
    """One window; ScheduleError saying what is wrong."""
    match = WINDOW.match(text)
    if match is None or not (match.group("days") or match.group("start")):
        raise ScheduleError(f"schedule window {text!r} is not DAYS, HH:MM-HH:MM or DAYS HH:MM-HH:MM "
                            "(e.g. \"Mo-Fr 22:00-06:00\", \"Sa-Su\")")
    days = _days(match.group("days"), text) if match.group("days") else frozenset(range(7))
    if not match.group("start"):
        return Window(days, 0, DAY_MINUTES)
    start, end = _minute(match.group("start"), text), _minute(match.group("end"), text)
    if start == end:
        raise ScheduleError(f"schedule window {text!r} begins when it ends")
    return Window(days, start, end)


def _days(text: str, window: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        a, b = _day(first, window), _day(last or first, window)
        out.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    return frozenset(out)


def _day(name: str, window: str) -> int:
    try:
        return DAYS.index(name.capitalize())
    except ValueError:
        raise ScheduleError(f"schedule window {window!r}: {name!r} is not a day ({' '.join(DAYS)})") from None


def _minute(text: str, window: str) -> int:
    hours, minutes = map(int, text.split(":"))
    if hours > 24 or minutes > 59 or hours * 60 + minutes > DAY_MINUTES:
        raise ScheduleError(f"schedule window {window!r}: {text} is not a time of day")
    return hours * 60 + minutes


@dataclass(frozen=True)
class Schedule:
    windows: tuple[Window, ...]

    @classmethod
    def of(cls, texts: list[str]) -> Schedule:
        return cls(tuple(parse(t) for t in texts))

    def open(self, when: datetime) -> bool:
        minute = when.hour * 60 + when.minute
        return any(w.open(when.weekday(), minute) for w in self.windows)

    def next_open(self, when: datetime) -> datetime | None:
        """The first minute at or after `when` in a window (None: no window ever opens)."""
        at = when.replace(second=0, microsecond=0)
        for _ in range(8 * DAY_MINUTES):
            if self.open(at):
                return max(at, when)
            at += timedelta(minutes=1)
        return None
