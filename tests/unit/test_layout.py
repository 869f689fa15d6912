"""The layout's contract (issue 33): mccs/core is the sans-I/O host. Its modules import neither
the shell, the client, the CLI, the testbed nor analytics, and nothing that does I/O or reads a
clock or a random source; a test in memory then runs exactly what the daemon runs. Checked on
each core module's own imports (an AST walk: a lazy import inside a function counts too)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

CORE = Path(__file__).resolve().parents[2] / "mccs" / "core"
UPWARD = ("mccs.daemon", "mccs.client", "mccs.cli", "mccs.testbed", "mccs.analytics")
IO = ("asyncio", "socket", "threading", "time", "random", "secrets", "sqlite3", "serial", "pwd", "grp", "os",
      "subprocess", "select", "checkpoint.store")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def _within(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def test_the_core_imports_nothing_above_it_and_no_io():
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) >= 19  # kernel, lists, dispatcher, lines, receiver, ... (a move would empty it)
    offences = {p.name: sorted(n for n in _imports(p) if n.startswith(".") or _within(n, UPWARD + IO))
                for p in modules}
    assert {k: v for k, v in offences.items() if v} == {}


def test_the_paper_s_parts_are_found_by_name_in_the_core():
    """Figure 2 of the paper, one step from the package: the names a reader looks for."""
    from mccs.core.dispatcher import ProcessDispatcher
    from mccs.core.kernel import Kernel
    from mccs.core.lines import LineControlBlock, Lines
    from mccs.core.lists import MSGBLOK, PRQBLOK, Lists
    from mccs.core.receiver import MessageReceiver
    assert {c.__module__ for c in (ProcessDispatcher, Kernel, LineControlBlock, Lines, MSGBLOK, PRQBLOK, Lists,
                                   MessageReceiver)} <= {f"mccs.core.{p.stem}" for p in CORE.glob("*.py")}
