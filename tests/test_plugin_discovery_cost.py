"""Plugin discovery costs a node without plugins nothing: ``importlib.metadata`` (which brings email,
zipfile, csv, bz2, lzma, pathlib, tempfile: 3.6 MiB resident) is imported only when a distribution on
``sys.path`` declares the ``qosmanager.strategies`` group, and then finds the plugin as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from plugindist import make_dist

PROBE = ("import json, sys\n"
         "import qosmanager.agent\n"
         "from qosmanager.framework import plugins\n"
         "found = [p.gate for p in plugins.discovered().plugins]\n"
         "print(json.dumps({'metadata': 'importlib.metadata' in sys.modules, 'found': found}))\n")


def probe(extra_path: str | None = None) -> dict:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_without_plugins_importlib_metadata_is_never_imported(tmp_path) -> None:
    # another group's entry points (a console script) are not a plugin
    root = make_dist(str(tmp_path / "other"), "other-tool", "1.0", {}, {"other_tool": "X = 1\n"})
    with open(os.path.join(root, "other_tool-1.0.dist-info", "entry_points.txt"), "w") as f:
        f.write("[console_scripts]\nother = other_tool:main\n")
    assert probe(root) == {"metadata": False, "found": []}


def test_a_declared_plugin_is_found_through_importlib_metadata(tmp_path) -> None:
    source = """
        from qosmanager.plugin import Strategy

        class Cheap(Strategy):
            name = "cheapProbe"
            gates = ("CheapProbe",)
            interval_key = "reconcile"

            def tick(self, ctx):
                return []
    """
    root = make_dist(str(tmp_path / "cheap"), "cheap-probe", "0.1", {"CheapProbe": "cheap_probe:Cheap"},
                     {"cheap_probe": source})
    assert probe(root) == {"metadata": True, "found": ["CheapProbe"]}
