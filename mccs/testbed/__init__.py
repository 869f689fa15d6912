"""The testbed shipped with MCCS: virtual serial lines, whole networks on one machine, the demo and
the benchmarks, so that an installed `mccs vserial | loopback | demo | bench` works without the
source checkout.

- `vserial`: virtual null-modem lines (pty pairs) paced to a baud, with faults; one line and its
  relay are in `vserial_line`.
- `hosts`, `traffic`, `loopback`: daemon processes, sender/receiver processes and the verdict.
- `demo`: the README's demo (a loopback network, then `mccs analyze`).
- `bench`, `bench_*`: `mccs bench local | line | network | analyze`.
- `linesim`: an in-memory line on a virtual clock (`mccs bench line` measures frame sizes with it);
  its impaired byte stream is `linesim_channel`.
- `tracegen`: synthetic traces with known answers (`mccs bench analyze` input), with
  `tracegen_spec` (what to generate), `tracegen_files` (rotated files), `tracegen_answers`.

- `hostsim`: daemon cores on a virtual clock, driven by the daemon's own driver (the unit tier's
  network of hosts; `mccs bench scale` runs one of any size).

The test suite uses these too.
"""
