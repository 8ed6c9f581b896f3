"""Plugin distributions made on the fly: a directory on ``sys.path`` holding the plugin's modules and a
``<name>-<version>.dist-info`` with its entry points, which is all ``importlib.metadata`` (and so the
agent's discovery) looks at.  The packaged example plugin is installed with pip instead
(tests/test_plugins.py); these are for the cases a real package should never be: broken, hostile.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping

from qosmanager.framework import plugins


def make_dist(root: str, name: str, version: str, entry_points: Mapping[str, str],
              modules: Mapping[str, str]) -> str:
    """Lay out the distribution under ``root``; returns ``root`` (the sys.path entry)."""
    os.makedirs(root, exist_ok=True)
    for mod, source in modules.items():
        with open(os.path.join(root, f"{mod}.py"), "w") as f:
            f.write(textwrap.dedent(source))
    info = os.path.join(root, f"{name.replace('-', '_')}-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write(f"[{plugins.GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    return root


@contextlib.contextmanager
def on_path(*roots: str) -> Iterator[plugins.Discovery]:
    """The distributions under ``roots`` installed for the duration: discovered again on entry and on exit
    (their modules forgotten), so no other test sees them."""
    before = set(sys.modules)
    sys.path[:0] = list(roots)
    try:
        yield plugins.rediscover()
    finally:
        for r in roots:
            sys.path.remove(r)
        for mod in set(sys.modules) - before:
            origin = getattr(sys.modules[mod], "__file__", None) or ""
            if any(origin.startswith(r) for r in roots):
                del sys.modules[mod]
        plugins.rediscover()
