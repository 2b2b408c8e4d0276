"""traceql's kernel table against NVIDIA's own summary: ``nsys stats -r gpukernsum`` on the bundled exports.

nsys' CUDA GPU kernel summary groups kernels by (demangled name, grid, block) over the whole export and gives
count, total, min and max duration per group; traceql's ``kernels`` table must give the same numbers for every
such signature. nsys reads the SQLite exports of any version here (the report is plain SQL over
``CUPTI_ACTIVITY_KIND_KERNEL``), so Debian's nsys 2022.4 in CI checks the 2025.3 exports too. It cannot open
``contention.nsys-rep`` (written by nsys 2025.3: "Version not supported"); that case runs where a newer nsys is
installed and is skipped, with nsys' message, elsewhere. ``contention_parquetdir`` holds the same capture as
``contention.sqlite.xz``, so the kernel summary of the SQLite file also checks the Parquet path of ingest.
"""

from __future__ import annotations

import csv
import functools
import io
import lzma
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import DATA, H200

import traceql

pytestmark = pytest.mark.nsys

Signature = tuple[str, tuple[int, int, int], tuple[int, int, int]]
Summary = dict[Signature, tuple[int, int, int, int]]  # count, total ns, min ns, max ns

SQLITE_EXPORTS = ["h200/overlap", "h200/contention", "h200/train_ddp", "h200/known_cause", "h200/known_cause_6144",
                  "h100/known_cause"]


@functools.cache
def _report_name(nsys: str) -> str:
    """The kernel summary's name in this nsys: ``gpukernsum`` up to 2023.1, ``cuda_gpu_kern_sum`` after."""
    out = subprocess.run([nsys, "stats", "--help-reports"], capture_output=True, text=True, timeout=60).stdout
    return "cuda_gpu_kern_sum" if "cuda_gpu_kern_sum" in out else "gpukernsum"


def nsys_kernel_summary(nsys: str, export: Path) -> Summary:
    """``nsys stats -r gpukernsum --format csv`` of ``export``, keyed by (name, grid, block)."""
    proc = subprocess.run([nsys, "stats", "-r", _report_name(nsys), "--format", "csv", "-o", "-", str(export)],
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    # nsys stats exits 0 even when it could not read the input: the CSV header is the evidence that it did.
    header = next((i for i, line in enumerate(lines) if line.startswith("Time (%)")), None)
    if header is None:
        message = (proc.stdout + proc.stderr).strip()
        unsupported = [line for line in message.splitlines() if "Version not supported" in line]
        if unsupported:
            pytest.skip(f"this nsys cannot open {export.name}: {unsupported[0].strip()}")
        pytest.fail(f"nsys stats gave no kernel summary for {export} (rc {proc.returncode}): {message}")
    summary: Summary = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[header:]))):
        grid = tuple(int(v) for v in row["GridXYZ"].split())
        block = tuple(int(v) for v in row["BlockXYZ"].split())
        key = (row["Name"], grid, block)
        assert key not in summary, f"nsys listed {key} twice"
        summary[key] = (int(row["Instances"]), int(row["Total Time (ns)"]), int(row["Min (ns)"]),
                        int(row["Max (ns)"]))
    return summary


def traceql_kernel_summary(run: Path) -> Summary:
    con = traceql.connect(run, views=False)
    try:
        rows = con.sql("""
            SELECT name, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                   count(*), sum(dur_ns)::BIGINT, min(dur_ns), max(dur_ns)
            FROM kernels GROUP BY ALL""").fetchall()
    finally:
        con.close()
    return {(r[0], tuple(r[1:4]), tuple(r[4:7])): tuple(r[7:]) for r in rows}


def assert_same(nsys: Summary, ours: Summary, what: str) -> None:
    assert nsys, f"nsys found no kernels in {what}"
    differ = {k: (nsys.get(k), ours.get(k)) for k in nsys.keys() | ours.keys() if nsys.get(k) != ours.get(k)}
    assert not differ, f"{what}: (nsys, traceql) differ for {len(differ)} signatures: {differ}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nsys_stats")


def _decompressed(workdir: Path, name: str) -> Path:
    dest = workdir / (name.replace("/", "_") + ".sqlite")
    if not dest.exists():
        with lzma.open(DATA / f"{name}.sqlite.xz") as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return dest


@pytest.mark.parametrize("name", SQLITE_EXPORTS)
def test_kernel_table_matches_nsys_stats(name, workdir, require_nsys):
    export = _decompressed(workdir, name)
    nsys = nsys_kernel_summary(require_nsys, export)
    run = workdir / f"{name.replace('/', '_')}_run"
    traceql.ingest(DATA / f"{name}.sqlite.xz", run)
    assert_same(nsys, traceql_kernel_summary(run), name)


def test_parquetdir_matches_nsys_stats_of_same_capture(workdir, require_nsys):
    nsys = nsys_kernel_summary(require_nsys, _decompressed(workdir, "h200/contention"))
    run = workdir / "contention_parquetdir_run"
    traceql.ingest(H200 / "contention_parquetdir", run)
    assert_same(nsys, traceql_kernel_summary(run), "contention_parquetdir")


def test_nsys_rep_matches_nsys_stats(workdir, require_nsys):
    """Runs only with an nsys that opens 2025.3 reports; the report is copied first because nsys stats exports a
    SQLite file beside its input."""
    rep = workdir / "contention.nsys-rep"
    shutil.copy(H200 / "contention.nsys-rep", rep)
    nsys = nsys_kernel_summary(require_nsys, rep)
    run = workdir / "contention_rep_run"
    traceql.ingest(rep, run)
    assert_same(nsys, traceql_kernel_summary(run), "contention.nsys-rep")
