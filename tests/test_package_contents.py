"""The shipped package carries no test doubles: the loopback fake API server lives in tests/.

The agent's package is what the image installs; a fake Kubernetes API server in it would be code
no production path uses, shipped to every node.  These tests look at the package as imported (CI
runs them against the installed wheel) and at the source tree the wheel is built from.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil

import qosmanager

PACKAGE_DIR = os.path.dirname(qosmanager.__file__)
SRC_DIR = os.path.join(os.path.dirname(__file__), "..", "src", "qosmanager")


def test_installed_package_has_no_fakeapi_module() -> None:
    assert importlib.util.find_spec("qosmanager.sim.fakeapi") is None
    names = {m.name for m in pkgutil.walk_packages(qosmanager.__path__, "qosmanager.")}
    assert "qosmanager.sim.simulate" in names  # the walk does see the package's modules
    assert not [n for n in names if "fakeapi" in n]


def _sources(top: str) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(top):
        out.extend(os.path.join(root, f) for f in files if f.endswith(".py"))
    return out


def test_no_shipped_source_defines_the_fake_api_server() -> None:
    for top in {os.path.realpath(PACKAGE_DIR), os.path.realpath(SRC_DIR)}:
        sources = _sources(top)
        assert sources, top
        for path in sources:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            assert "class FakeAPIServer" not in text, path
            assert "class FakeCluster" not in text, path


def test_the_tests_import_the_fake_from_their_support_code() -> None:
    import fakeapi

    assert os.path.dirname(os.path.realpath(fakeapi.__file__)) == os.path.dirname(os.path.realpath(__file__))
