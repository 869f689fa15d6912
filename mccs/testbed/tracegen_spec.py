"""What `tracegen` generates: the `TraceSpec` and the network it describes (host ids, and
the lines between them as a ring, then chords)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TraceSpec:
    """What to generate. Rates are per data-frame transmission."""
    hosts: int = 4
    lines: int | None = None           # default: a ring (a single line for two hosts)
    messages: int = 1000               # messages accepted (all kinds below included)
    duration: float = 3600.0           # seconds of traffic
    start: float = 1_700_000_000.0     # epoch seconds of the first event
    seed: int = 1
    local_share: float = 0.05          # messages to a process on the same host
    max_message: int = 128
    frame_error_rate: float = 0.02     # data frame arrives with a bad check: reject, retransmit
    frame_loss_rate: float = 0.01      # data frame lost: timeout, retry, retransmit
    ack_loss_rate: float = 0.005       # answer lost: async retransmits (a duplicate arrival)
    busy_rate: float = 0.01            # receiver answers busy (B / WACK)
    noise_rate: float = 0.0            # a run of noise (damaged frames, traced as one) before an arrival
    outages: int = 2                   # line outages (down ... up), spread over the lines
    outage_seconds: tuple[float, float] = (30.0, 300.0)
    lost: int = 3                      # accepted, never received
    pending: int = 2                   # received, never delivered
    duplicated: int = 2                # delivered twice
    id_space: int = 65536              # MSG_ID modulus; smaller values force reuse in tests
    bauds: tuple[int, ...] = (2400, 4800, 9600, 19200)
    keepalive: float = 30.0            # async keep-alive period
    rotate_events: int = 50_000        # events per trace file before rotation
    compress_rotated: bool = True      # rotated files become .jsonl.gz
    malformed: int = 0                 # bad lines mixed into the files
    unknown_fields: bool = True        # sprinkle fields the schema does not know


def host_ids(n: int) -> list[str]:
    return [chr(65 + i // 26) + chr(65 + i % 26) for i in range(n)]


def topology(hosts: list[str], n_lines: int | None) -> list[tuple[str, str]]:
    """A ring (so every host has a neighbour), then chords, as sorted pairs."""
    n = len(hosts)
    pairs: list[tuple[str, str]] = []
    for step in range(1, n):
        for i in range(n):
            a, b = sorted((hosts[i], hosts[(i + step) % n]))
            p = (a, b)
            if p not in pairs:
                pairs.append(p)
    want = n_lines if n_lines is not None else (n if n > 2 else 1)
    if not 1 <= want <= len(pairs):
        raise ValueError(f"{n} hosts allow 1..{len(pairs)} lines, not {want}")
    return pairs[:want]


def line_name(a: str, b: str) -> str:
    return "-".join(sorted((a, b)))
