"""Every source file reads on a screen or two, or says why it stays whole.

A module of ``src/`` longer than :data:`MAX_LINES` lines must say in its first docstring why it is
not split, on a line holding :data:`MARKER` (``This file stays whole: one table read against
koordinator's Go types``).  Every module of some length opens with a docstring (a map of the file:
what it holds, top to bottom, and the rooms it leans on).
"""

from __future__ import annotations

import ast
from pathlib import Path

import qosmanager

ROOT = Path(qosmanager.__file__).resolve().parent
MAX_LINES = 700
MARKER = "stays whole:"
DOCSTRING_FROM = 50  # lines: a shorter module (an entry point, a package marker) may go without one


def problems(root: Path) -> list[str]:
    """What breaks the rule below ``root``: one line per module."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        doc = ast.get_docstring(ast.parse(text, str(path))) or ""
        rel = path.relative_to(root.parent)
        if lines >= DOCSTRING_FROM and not doc.strip():
            out.append(f"{rel}: {lines} lines and no module docstring (a map of the file)")
        if lines > MAX_LINES and not any(MARKER in ln for ln in doc.splitlines()):
            out.append(f"{rel}: {lines} lines (> {MAX_LINES}): split it where a reader would, or say on a "
                       f"line of its first docstring why it {MARKER} ...")
    return out


def test_every_source_file_is_small_or_says_why_it_stays_whole() -> None:
    assert problems(ROOT) == []


def _module(path: Path, doc: str | None, lines: int) -> None:
    head = [f'"""{doc}"""', ""] if doc is not None else []
    path.write_text("\n".join(head + [f"x{i} = {i}" for i in range(lines - len(head))]) + "\n", encoding="utf-8")


def test_the_rule_catches_a_long_file_without_its_reason(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    _module(pkg / "small.py", "A small module.", MAX_LINES)
    _module(pkg / "whole.py", f"A table.\n\nThis file {MARKER} one table reads better whole.", MAX_LINES + 1)
    _module(pkg / "long.py", "A long module that says nothing about its length.", MAX_LINES + 1)
    _module(pkg / "bare.py", None, DOCSTRING_FROM)
    _module(pkg / "tiny.py", None, DOCSTRING_FROM - 1)
    found = problems(pkg)
    assert [p.split(":")[0] for p in found] == ["pkg/bare.py", "pkg/long.py"], found
