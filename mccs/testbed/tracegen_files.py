"""The trace files `tracegen` writes: each host's events in time order, in files rotated every
`TraceSpec.rotate_events` events, the rotated ones gzipped unless the spec says otherwise."""
from __future__ import annotations

import bisect
import gzip
import math
import shutil
from pathlib import Path
from typing import TextIO

from mccs.testbed.tracegen_spec import TraceSpec


class TraceWriter:
    """Per-host buffers flushed in time order into rotated (optionally gzipped) files."""

    def __init__(self, root: Path, spec: TraceSpec, hosts: list[str]):
        self.root, self.spec = root, spec
        self.buf: dict[str, list] = {h: [] for h in hosts}
        self.files: dict[str, TextIO] = {}
        self.count: dict[str, int] = {h: 0 for h in hosts}
        self.part: dict[str, int] = {h: 0 for h in hosts}
        self.paths: list[Path] = []
        self.stamp = f"{int(spec.start)}"
        for h in hosts:
            (root / h).mkdir(parents=True, exist_ok=True)

    def add(self, host: str, ts: float, text: str) -> None:
        self.buf[host].append((ts, text))

    def flush(self, watermark: float) -> None:
        for host, buf in self.buf.items():
            buf.sort(key=lambda e: e[0])
            cut = bisect.bisect_left(buf, (watermark,)) if watermark != math.inf else len(buf)
            for _, text in buf[:cut]:
                self._write(host, text)
            del buf[:cut]

    def _write(self, host: str, text: str) -> None:
        f = self.files.get(host)
        if f is None or self.count[host] >= self.spec.rotate_events:
            if f is not None:
                self._rotate(host)
            self.part[host] += 1
            path = self.root / host / f"{host}-{self.stamp}-{self.part[host]:03d}.jsonl"
            self.paths.append(path)
            f = self.files[host] = open(path, "w", encoding="utf-8", buffering=1 << 20)
            self.count[host] = 0
        f.write(text)
        self.count[host] += 1

    def _rotate(self, host: str) -> None:
        f = self.files.pop(host)
        f.close()
        if self.spec.compress_rotated:
            path = Path(f.name)
            with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb", compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            path.unlink()
            self.paths[self.paths.index(path)] = Path(f"{path}.gz")

    def close(self) -> None:
        self.flush(math.inf)
        for f in self.files.values():
            f.close()
