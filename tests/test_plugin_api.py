"""The strategy API as a plugin author meets it: :mod:`qosmanager.plugin` is exactly what docs/strategies.md
lists, typed (``py.typed``, so ``mypy --strict`` checks a plugin against the installed package), and the
example plugin (examples/be-burst-cap) imports nothing else of the agent, type-checks strictly against it
and passes the project's lint.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import qosmanager
import qosmanager.plugin as api

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "be-burst-cap"
DOC = ROOT / "docs" / "strategies.md"


def documented_names() -> set[str]:
    """The names in the first column of the table under '## The API'."""
    section = DOC.read_text(encoding="utf-8").split("## The API", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "no table of names under '## The API' in docs/strategies.md"
    return {name for row in rows for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", row.split("|")[1])}


def test_the_api_module_exports_exactly_what_the_docs_list() -> None:
    assert documented_names() == set(api.__all__)
    assert f"version {api.API_VERSION})" in DOC.read_text(encoding="utf-8")  # the heading names the version


def test_every_exported_name_resolves() -> None:
    missing = [n for n in api.__all__ if getattr(api, n, None) is None]
    assert not missing
    assert api.Harness.__module__ == "qosmanager.sim.harness"  # loaded on demand


def test_the_package_is_typed_for_plugins() -> None:
    """PEP 561: without py.typed, mypy skips an installed qosmanager (import-untyped) and a plugin's
    ``Strategy`` base becomes Any."""
    assert (Path(qosmanager.__file__).parent / "py.typed").is_file()


def example_sources() -> list[Path]:
    return sorted(p for p in EXAMPLE.rglob("*.py") if "build" not in p.parts)


def test_the_example_imports_only_the_public_api() -> None:
    sources = example_sources()
    assert len(sources) >= 2
    private = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            private += [f"{path.relative_to(EXAMPLE)}: {n}" for n in names
                        if (n == "qosmanager" or n.startswith("qosmanager.")) and n != "qosmanager.plugin"]
    assert not private, private


def test_the_example_type_checks_strictly_and_lints(tmp_path: Path) -> None:
    """``mypy --strict`` on the example's package and tests, run from a copy of its directory (no
    configuration of this repository applies), against the qosmanager this interpreter imports."""
    src = tmp_path / "be-burst-cap"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*"))
    path = [str(src / "src")]
    parent = os.path.dirname(os.path.dirname(qosmanager.__file__))
    if parent not in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}:
        path.append(parent)  # an editable install: mypy does not follow its import hook
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                          "--cache-dir", str(tmp_path / "mypy-cache"), "src", "tests"],
                         cwd=src, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "MYPYPATH": os.pathsep.join(path)})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-m", "ruff", "check", str(EXAMPLE)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
