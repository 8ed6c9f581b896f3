"""No import circles in the package: every module's imports (at the top, in functions and under
``TYPE_CHECKING`` alike, read from the source) form a graph without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import qosmanager

ROOT = Path(qosmanager.__file__).resolve().parent


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports (``from pkg import mod`` names the module ``pkg.mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            for a in node.names:
                found.add(f"{source}.{a.name}" if f"{source}.{a.name}" in known else source)
    return {m for m in found if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_checker_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_relative_and_module_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "qosmanager"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\nfrom typing import TYPE_CHECKING\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from qosmanager.sub.a import f\n")
    known = modules(pkg)
    graph = {m: imports(m, p, known) for m, p in known.items()}
    assert graph["qosmanager.sub.a"] == {"qosmanager.sub.b"} and graph["qosmanager.sub.b"] == {"qosmanager.sub.a"}
    assert cycles(graph) == [["qosmanager.sub.a", "qosmanager.sub.b"]]


def test_no_import_circles_in_the_package() -> None:
    known = modules(ROOT)
    assert "qosmanager.executor.executor" in known
    graph = {m: imports(m, p, known) for m, p in known.items()}
    found = cycles(graph)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
