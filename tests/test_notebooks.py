"""The notebooks in notebooks/ run top to bottom against the bundled data, and are committed without outputs.

Each notebook is executed once per session with nbclient, in a kernel that runs this interpreter (a kernelspec
written to a temporary JUPYTER_PATH, so a user-wide ``python3`` kernel of another Python cannot be picked up).
Checks on the outputs compare what a notebook printed with the same facts read independently of traceql: the
raw nsys export (sqlite3) and the run store's manifest.json.
"""

from __future__ import annotations

import ast
import json
import lzma
import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
H200 = REPO / "tests" / "data" / "h200"
SUITE = H200 / "suite"
KERNEL = "traceql-notebook-test"


def test_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"explore_run.ipynb", "compare_runs.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts; clear them before committing"


@pytest.fixture(scope="session")
def kernel_name(tmp_path_factory) -> str:
    spec_dir = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"traceql tests ({sys.executable})",
        "language": "python",
    }))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(spec_dir.parent.parent),
                                                                os.environ.get("JUPYTER_PATH")])))
        yield KERNEL


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(scope="session")
def executed(kernel_name):
    """name -> executed notebook; each notebook runs once, from notebooks/ as Jupyter would start it."""
    cache: dict[str, nbformat.NotebookNode] = {}

    def run(name: str) -> nbformat.NotebookNode:
        if name not in cache:
            nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
            client = NotebookClient(nb, kernel_name=kernel_name, timeout=600, startup_timeout=120,
                                    resources={"metadata": {"path": str(REPO / "notebooks")}})
            client.execute()  # raises CellExecutionError on the first cell that fails
            cache[name] = nb
        return cache[name]

    return run


def _tagged_stdout(nb: nbformat.NotebookNode, tag: str) -> str:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return "".join(o.get("text", "") for o in cells[0].outputs if o.output_type == "stream" and o.name == "stdout")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, executed):
    nb = executed(path.name)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a code cell did not run"


def test_explore_run_devices_match_the_raw_export(executed, tmp_path):
    db = tmp_path / "overlap.sqlite"
    with lzma.open(H200 / "overlap.sqlite.xz") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (n_devices,) = con.execute("SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        con.close()
    out = _tagged_stdout(executed("explore_run.ipynb"), "check:devices")
    m = re.search(r"^(\d+) devices: (.+)$", out, re.M)
    assert m, out
    assert int(m.group(1)) == n_devices == 2
    assert m.group(2).split(", ") == ["NVIDIA H200"] * n_devices


def test_compare_runs_names_and_ctas_match_the_manifest(executed):
    before = _tree(SUITE)
    nb = executed("compare_runs.ipynb")
    assert _tree(SUITE) == before, "the notebook wrote into the bundled run store"

    manifest = json.loads((SUITE / "manifest.json").read_text())["runs"]
    labelled = {info["labels"]["name"]: info["labels"] for info in manifest.values() if "labels" in info}
    m = re.search(r"^(\d+) runs: (.+)$", _tagged_stdout(nb, "check:runs"), re.M)
    assert m
    names = m.group(2).split(", ")
    assert int(m.group(1)) == len(names) == len(manifest)
    assert set(labelled) <= set(names)

    out = _tagged_stdout(nb, "check:ctas")
    ctas = ast.literal_eval(out.split("NCCL CTAs per run:", 1)[1].strip())
    capped = {name: int(labels["env.NCCL_MAX_CTAS"]) for name, labels in labelled.items()
              if "env.NCCL_MAX_CTAS" in labels}
    assert capped, "the suite should hold runs with NCCL_MAX_CTAS set"
    for name, max_ctas in capped.items():
        assert ctas[name] == max_ctas, (name, ctas)
    assert ctas["overlap"] > max(capped.values())  # NCCL's default uses more channels than either cap
