"""The installed package holds every subpackage of the source tree (an unlisted one imports from a checkout and fails
once installed from a wheel, as `traceql collect` on a GPU machine does)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "traceql").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found, "no package found"
    assert found <= listed, sorted(found - listed)
