"""``traceql overlap`` (traceql/overlap.py) and the lazy ingest beneath it (``traceql.ingest(..., defer=...)``).

- The three ways to the numbers agree on every bundled export format: a raw trace read a few columns at a time
  (``traceql.ingest.read_intervals``), a trace ingested lazily into a kept run directory, and a run directory
  ingested eagerly.
- The numbers equal brute force computed here from the raw SQLite export with sqlite3 and Python alone: per
  physical GPU, the union of compute kernels, of communication (NCCL kernels, peer copies) and their intersection.
- ``traceql.engine.device_unions`` equals the ``_device_unions`` of the full engine and of the reference SQL, and
  ``_union_intervals`` classifies as ``_activity_rows`` does (queries/_union_intervals.sql relies on this file).
- Kernel names matter only through their class.
- A lazy ingest leaves runtime_api, nvtx and gpu_metrics in the export until a query needs them; then they are the
  tables an eager ingest writes. A changed or deleted export is refused with the command that repairs the store.
- The CLI: ``traceql overlap`` as a table and as JSON, a missing input, ``--keep``.

The tests at the end were written against bugs of the first version (each failed then); they keep them fixed.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import (
    DATA,
    H200,
    NSYS2022,
    intervals_intersection,
    intervals_length,
    merged_intervals,
    raw_query,
    run_cli,
)
from conftest import cli_in_process as cli

import traceql
from traceql import engine, store
from traceql.classify import classify
from traceql.errors import BadInputError, UsageError
from traceql.ingest import DEFERRABLE
from traceql.overlap import NEEDS, overlap
from traceql.queries_loader import create_views
from traceql.sources.nsys.adapter import Adapter
from traceql.store import schema

SUITE = H200 / "suite"
TRACES = {"h200x2_train_ddp": DATA / "h200x2" / "train_ddp.sqlite.xz", "h200_overlap": H200 / "overlap.sqlite.xz",
          "h200_contention_parquetdir": H200 / "contention_parquetdir",
          "h100_known_cause": DATA / "h100" / "known_cause.sqlite.xz"}
# the session's eager ingests of the same inputs (tests/conftest.py): a .xz (which even a lazy ingest reads whole,
# from its temporary decompressed copy) and a directory export; the other two are given decompressed (so that a
# kept store defers their largest tables) and ingested here
EAGER_FIXTURES = {"h200_overlap": "overlap_run", "h200_contention_parquetdir": "contention_parquet_run"}
COUNTS = ("span_ns", "compute_only_ns", "comm_only_ns", "overlap_ns", "idle_ns", "compute_ns", "comm_ns",
          "compute_kernels", "comm_kernels", "peer_copies")
PEER = 10  # CUPTI's copyKind of a peer-to-peer copy


# -- decompressed exports ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sqlite_export(tmp_path_factory):
    """``sqlite_export(name)``: a bundled SQLite trace of TRACES (or H200's contention), decompressed once with
    Python's lzma (read-only: tests that change an export copy it)."""
    folder = tmp_path_factory.mktemp("overlap_exports")
    sources = {**TRACES, "h200_contention": H200 / "contention.sqlite.xz"}

    def get(name: str) -> Path:
        dest = folder / f"{name}.sqlite"
        if not dest.exists():
            with lzma.open(sources[name]) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            dest.chmod(0o444)
        return dest

    return get


def _writable_copy(src: Path, dest: Path) -> Path:
    shutil.copyfile(src, dest)  # not shutil.copy: the mode of a read-only source would come along
    return dest


# -- brute force, from the raw export alone ---------------------------------------------------------------------------

def reference(db: Path) -> dict[int, dict[str, int]]:
    """Per physical GPU, the overlap numbers of an nsys SQLite export, from sqlite3 and Python only: kernels are
    communication when ``classify`` says their demangled name is, peer copies (copyKind 10) are communication, every
    other kernel is compute; the device is TARGET_INFO_CUDA_DEVICE's gpuId for the launching process's ordinal
    (pid = (globalPid >> 24) & 0xFFFFFF). Rows without times, ending before they start or on a negative device are
    left out, and a record repeated exactly is counted once."""
    tables = {r[0] for r in raw_query(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    gpu: dict[tuple[int, int], int] = {}
    if "TARGET_INFO_CUDA_DEVICE" in tables:
        for g, c, p in raw_query(db, "SELECT gpuId, cudaId, pid FROM TARGET_INFO_CUDA_DEVICE"):
            gpu[(p, c)] = min(g, gpu.get((p, c), g))
    names = dict(raw_query(db, "SELECT id, value FROM StringIds"))

    def device(pid: int | None, ordinal: int) -> int:
        return ordinal if pid is None else gpu.get(((pid >> 24) & 0xFFFFFF, ordinal), ordinal)

    rows: dict[tuple, None] = {}  # ordered set: exact repeats once
    for s, e, d, pid, corr, name in raw_query(db, "SELECT start, end, deviceId, globalPid, correlationId, "
                                                  "demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        if s is not None and e is not None and e >= s:
            comm = name in names and classify(names[name]).kind == "comm"
            rows[("kernel", 0 if comm else 1, pid, device(pid, d), corr, s, e)] = None
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for s, e, d, pid, corr in raw_query(db, "SELECT start, end, deviceId, globalPid, correlationId FROM "
                                                "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ?", (PEER,)):
            if s is not None and e is not None and e >= s:
                rows[("memcpy", 0, pid, device(pid, d), corr, s, e)] = None
    by_device: dict[int, list[tuple[str, int, int, int]]] = {}
    for activity, cls, _, d, _, s, e in rows:
        if d is not None and d >= 0:
            by_device.setdefault(d, []).append((activity, cls, s, e))
    out = {}
    for d, acts in sorted(by_device.items()):
        compute = merged_intervals([(s, e) for _, c, s, e in acts if c == 1])
        comm = merged_intervals([(s, e) for _, c, s, e in acts if c == 0])
        both = intervals_length(merged_intervals([(s, e) for _, _, s, e in acts]))
        overlap_ns = intervals_intersection(compute, comm)
        # inclusion-exclusion: the reference checks itself
        assert overlap_ns == intervals_length(compute) + intervals_length(comm) - both
        span = max(e for *_, e in acts) - min(s for _, _, s, _ in acts)
        out[d] = {"span_ns": span, "compute_only_ns": intervals_length(compute) - overlap_ns,
                  "comm_only_ns": intervals_length(comm) - overlap_ns, "overlap_ns": overlap_ns, "idle_ns": span - both,
                  "compute_ns": intervals_length(compute), "comm_ns": intervals_length(comm),
                  "compute_kernels": sum(a == "kernel" and c == 1 for a, c, _, _ in acts),
                  "comm_kernels": sum(a == "kernel" and c == 0 for a, c, _, _ in acts),
                  "peer_copies": sum(a == "memcpy" for a, _, _, _ in acts)}
    return out


def _by_device(table) -> dict[int, dict[str, int]]:
    rows = table.to_pylist()
    assert len({r["run_id"] for r in rows}) == 1
    return {r["device_id"]: {k: r[k] for k in COUNTS} for r in rows}


def _rename(db: Path, which: str, to: str) -> int:
    """Give the kernels of ``db`` whose demangled name's kind is (``which="comm"``) or is not (``"other"``)
    communication the name ``TO_<string id>``; the number of kernel rows renamed."""
    con = sqlite3.connect(db)
    try:
        ids = [i for i, v in con.execute("SELECT id, value FROM StringIds WHERE id IN "
                                         "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)")
               if (classify(v).kind == "comm") == (which == "comm")]
        con.executemany("UPDATE StringIds SET value = ? WHERE id = ?", [(f"{to}_{i}", i) for i in ids])
        con.commit()
        marks = ",".join("?" * len(ids))
        return con.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName IN ({marks})",
                           ids).fetchall()[0][0]
    finally:
        con.close()


# -- the three paths agree ------------------------------------------------------------------------------------------

def _refuse(self, *args, **kwargs):
    raise AssertionError("read a table that the overlap does not need")


@pytest.mark.parametrize("name", sorted(TRACES))
def test_raw_kept_and_ingested_give_the_same_table(name, request, sqlite_export, tmp_path, monkeypatch):
    """The raw-trace path, the kept lazy store and an eager ingest: the same table, source_path and run_id
    included (all three name the run by the input's sha256 and record its resolved path). The raw path reads the
    export through kernel_intervals and copy_intervals alone; the kept store reads none of what it defers."""
    trace = TRACES[name] if name in EAGER_FIXTURES else sqlite_export(name)
    with monkeypatch.context() as m:
        for method in ("kernels", "memcpy", "memset", *DEFERRABLE):
            m.setattr(Adapter, method, _refuse)
        raw = overlap(trace)
    with monkeypatch.context() as m:
        if trace.suffix != ".xz":  # a .xz is decompressed for the ingest alone, so all of it is read at once
            for method in DEFERRABLE:
                m.setattr(Adapter, method, _refuse)
        kept = overlap(trace, workdir=tmp_path / "keep")
    if name in EAGER_FIXTURES:
        eager_dir = request.getfixturevalue(EAGER_FIXTURES[name])
    else:
        eager_dir = tmp_path / "eager"
        traceql.ingest(trace, eager_dir)
    eager = overlap(eager_dir)
    assert raw.num_rows >= 1 and raw.column_names[-1] == "source_path"
    assert raw.equals(kept), (raw.to_pylist(), kept.to_pylist())
    assert raw.equals(eager), (raw.to_pylist(), eager.to_pylist())
    assert set(raw.column("source_path").to_pylist()) == {str(trace.resolve())}
    # every kernel is counted once, as compute or as communication
    kernels = _count(eager_dir, "kernels")
    assert sum(raw.column("compute_kernels").to_pylist()) + sum(raw.column("comm_kernels").to_pylist()) == kernels
    # the kept store is lazy where the export stays, complete where it was a temporary copy (.xz)
    (entry,) = store.read_manifest(tmp_path / "keep")["runs"].values()
    folder = store.run_dir(tmp_path / "keep", entry["run_id"])
    if trace.suffix == ".xz":
        assert not entry.get("deferred") and (folder / "runtime_api.parquet").exists()
    else:
        assert entry["deferred"] == list(DEFERRABLE)
        assert not any((folder / f"{t}.parquet").exists() for t in DEFERRABLE)


def test_contention_as_sqlite_and_as_parquet_directory_agree(sqlite_export):
    """One trace exported twice (SQLite, Parquet directory): the same numbers, both equal to brute force."""
    from_sqlite = _by_device(overlap(sqlite_export("h200_contention")))
    from_parquet = _by_device(overlap(TRACES["h200_contention_parquetdir"]))
    assert from_sqlite == from_parquet == reference(sqlite_export("h200_contention"))
    assert sum(r["peer_copies"] for r in from_sqlite.values()) > 0  # communication here is peer copies


def test_run_directories_and_traces_together(overlap_run, sqlite_export, capsys):
    """A run directory and a raw trace in one call: the rows of both, each as it is alone (the run directory's as
    its trace's: test_raw_kept_and_ingested_give_the_same_table); a trace given twice is read once, with a note."""
    trace = sqlite_export("h100_known_cause")
    h100 = overlap(trace)
    both = overlap([overlap_run, trace]).to_pylist()
    alone = overlap(TRACES["h200_overlap"]).to_pylist() + h100.to_pylist()
    assert sorted(both, key=lambda r: (r["run_id"], r["device_id"])) == \
        sorted(alone, key=lambda r: (r["run_id"], r["device_id"]))
    assert len({r["run_id"] for r in both}) == 2
    capsys.readouterr()
    assert overlap([trace, trace]).equals(h100)
    assert "is a trace given before; it is read once" in capsys.readouterr().err


def test_no_kernels_and_no_input_are_refused(tmp_path):
    with pytest.raises(BadInputError, match="no CUDA kernel"):
        overlap(NSYS2022 / "cpu_nvtx.sqlite")
    with pytest.raises(BadInputError, match="no such file"):
        overlap(tmp_path / "absent.sqlite")
    with pytest.raises(UsageError):
        overlap([])


# -- against brute force ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "devices"), [("h200x2_train_ddp", {0, 1}), ("h200_overlap", {0, 1}),
                                               ("h200_contention", {0}), ("h100_known_cause", {0})])
def test_equals_brute_force(name, devices, sqlite_export):
    db = sqlite_export(name)
    want = reference(db)
    assert set(want) == devices
    assert _by_device(overlap(db)) == want
    if name in ("h200x2_train_ddp", "h200_overlap"):  # NCCL kernels beside compute on each GPU
        assert all(w["comm_kernels"] > 0 and w["overlap_ns"] > 0 and w["idle_ns"] > 0 for w in want.values())


def test_devices_are_the_physical_gpus(sqlite_export, tmp_path):
    """One process's CUDA ordinal mapped to another GPU (as under CUDA_VISIBLE_DEVICES): its kernels move to that
    GPU, in the raw path and in a store alike, and the other process's stay."""
    db = _writable_copy(sqlite_export("h200_overlap"), tmp_path / "mapped.sqlite")
    (pid,), = raw_query(db, "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL "
                            "WHERE deviceId = 1")
    con = sqlite3.connect(db)
    con.execute("UPDATE TARGET_INFO_CUDA_DEVICE SET gpuId = cudaId + 6 WHERE pid = ?", (pid,))
    con.commit()
    con.close()
    before = _by_device(overlap(sqlite_export("h200_overlap")))
    raw = overlap(db)
    after = _by_device(raw)
    assert after == {0: before[0], 7: before[1]}
    assert after == reference(db)
    traceql.ingest(db, tmp_path / "run", defer=DEFERRABLE)
    assert overlap(tmp_path / "run").equals(raw)


@pytest.mark.parametrize("rename", ["compute", "comm", "one_to_comm"])
def test_names_matter_only_through_their_class(rename, sqlite_export, tmp_path):
    """Kernels renamed: other names of the same class change nothing; names of another class move the kernels to
    that class, as brute force says."""
    original = sqlite_export("h200_overlap")
    db = _writable_copy(original, tmp_path / "renamed.sqlite")
    before = _by_device(overlap(original))
    if rename == "compute":  # compute, memory and other kernels (a FillFunctor among them) all become "my_gemm_N"
        kinds = {classify(v).kind for (v,) in raw_query(original, "SELECT s.value FROM StringIds s JOIN "
                                                                  "CUPTI_ACTIVITY_KIND_KERNEL k "
                                                                  "ON s.id = k.demangledName")}
        assert {"compute", "memory", "comm"} <= kinds
        assert _rename(db, "other", "my_gemm") > 0
    elif rename == "comm":  # the NCCL kernels become compute kernels
        assert _rename(db, "comm", "my_gemm") > 0
    else:  # one compute kernel becomes an NCCL kernel
        (sid, n), = raw_query(db, "SELECT s.id, count(*) FROM StringIds s JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                                  "ON s.id = k.demangledName WHERE s.value LIKE 'nvjet%' GROUP BY 1")
        con = sqlite3.connect(db)
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", sid))
        con.commit()
        con.close()
        assert n > 0
    raw = overlap(db)
    after = _by_device(raw)
    assert after == reference(db)
    if rename == "compute":
        assert after == before
        # every kernel is now a "my_gemm_N" or an NCCL kernel (and the export another file: another run)
        names = {v for (v,) in raw_query(db, "SELECT s.value FROM StringIds s JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                                             "ON s.id = k.demangledName")}
        assert all(v.startswith(("my_gemm_", "ncclDevKernel_")) for v in names)
        assert raw.column("run_id")[0] != overlap(original).column("run_id")[0]
    elif rename == "comm":
        for d, a in after.items():
            b = before[d]
            assert a["comm_kernels"] == 0 and a["comm_ns"] == 0 and a["overlap_ns"] == 0
            assert a["compute_kernels"] == b["compute_kernels"] + b["comm_kernels"]
            assert a["compute_ns"] == b["compute_ns"] + b["comm_ns"] - b["overlap_ns"]
            assert a["idle_ns"] == b["idle_ns"] and a["span_ns"] == b["span_ns"]
    else:
        assert sum(a["comm_kernels"] for a in after.values()) == sum(b["comm_kernels"] for b in before.values()) + n
        assert after != before


# -- the engine -------------------------------------------------------------------------------------------------------

def _unions(run: Path, how: str) -> list[tuple]:
    with traceql.connect(run, views=False) as con:
        if how == "full_engine":  # the engine's stages as prepare runs them
            create_views(con)
            for stage in engine.STAGES.values():
                stage(con)
        else:
            create_views(con, only=["_device_unions", "_union_intervals", "_activity_rows"])
        if how == "device_unions":
            engine.device_unions(con)
        # "sql": the view's reference SQL over _activity_steps
        return con.sql("SELECT run_id, device_id, compute_ns, comm_ns, overlap_ns FROM _device_unions "
                       "ORDER BY ALL").fetchall()


@pytest.mark.parametrize("fixture", ["overlap_run", "contention_parquet_run", "suite"])
def test_device_unions_equal_the_full_engine(fixture, request):
    run = SUITE if fixture == "suite" else request.getfixturevalue(fixture)
    alone = _unions(run, "device_unions")
    assert alone == _unions(run, "full_engine") == _unions(run, "sql")
    assert alone and any(comm > 0 for *_, comm, _ in alone)
    if fixture == "suite":
        assert len({r[0] for r in alone}) > 1
    else:
        assert any(o > 0 for *_, o in alone)


@pytest.mark.parametrize("fixture", ["overlap_run", "contention_parquet_run", "suite"])
def test_union_intervals_classify_as_activity_rows(fixture, request):
    """_union_intervals keeps the co-runner classes of _activity_rows: the same intervals, each in the same class
    (communication: NCCL kernels and peer copies; compute: every other kernel)."""
    run = SUITE if fixture == "suite" else request.getfixturevalue(fixture)
    with traceql.connect(run, views=False) as con:
        create_views(con, only=["_union_intervals", "_activity_rows"])
        unions = con.sql("SELECT run_id, device_id, activity, start_ns, end_ns, cls, count(*) FROM _union_intervals "
                         "GROUP BY ALL ORDER BY ALL").fetchall()
        rows = con.sql("SELECT run_id, device_id, activity, start_ns, end_ns, "
                       "CASE corunner_kind WHEN 'comm' THEN 0 ELSE 1 END, count(*) FROM _activity_rows "
                       "WHERE corunner_kind IN ('comm', 'compute') GROUP BY ALL ORDER BY ALL").fetchall()
    assert unions == rows
    assert {r[5] for r in unions} == {0, 1}


# -- lazy ingest ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def eager_overlap(sqlite_export, tmp_path_factory) -> Path:
    """overlap.sqlite, decompressed (a .xz input is never deferred), ingested eagerly."""
    out = tmp_path_factory.mktemp("eager_overlap") / "run"
    (info,) = traceql.ingest(sqlite_export("h200_overlap"), out, defer=())
    assert info.deferred == []
    return out


@pytest.fixture(scope="module")
def eager_overlap_table(eager_overlap):
    return overlap(eager_overlap)


@pytest.fixture()
def lazy(sqlite_export, eager_overlap, tmp_path) -> tuple[Path, Path, Path]:
    """(export, lazy run directory, eager run directory): a copy of overlap.sqlite of this test's own, ingested
    lazily; the same bytes ingested eagerly (the same run id)."""
    export = _writable_copy(sqlite_export("h200_overlap"), tmp_path / "overlap.sqlite")
    (info,) = traceql.ingest(export, tmp_path / "lazy", defer=DEFERRABLE)
    assert info.deferred == list(DEFERRABLE)
    assert [info.run_id] == list(store.read_manifest(eager_overlap)["runs"])
    return export, tmp_path / "lazy", eager_overlap


def _entry(root: Path) -> dict:
    (entry,) = store.read_manifest(root)["runs"].values()
    return entry


def _same_numbers(a, b) -> bool:
    """The same rows, but for source_path (the lazy runs are of a copy of the eager run's export)."""
    return a.num_rows > 0 and a.drop(["source_path"]).equals(b.drop(["source_path"]))


def _count(root: Path, table: str, needs=None) -> int:
    con = store.connect(root, needs=needs, views=False)
    try:
        return con.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    finally:
        con.close()


def test_lazy_ingest_leaves_the_largest_tables_in_the_export(lazy):
    export, lazy_dir, eager_dir = lazy
    entry, eager = _entry(lazy_dir), _entry(eager_dir)
    stat = export.stat()
    assert entry["deferred"] == list(DEFERRABLE)
    assert entry["export"] == {"path": str(export.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    assert not eager.get("deferred") and not eager.get("export")
    folder = store.run_dir(lazy_dir, entry["run_id"])
    assert not any((folder / f"{t}.parquet").exists() for t in DEFERRABLE)
    assert (folder / "kernels.parquet").exists()
    assert all(eager["tables"][t] > 0 for t in DEFERRABLE)  # there was something to defer
    assert {t: n for t, n in eager["tables"].items() if t not in DEFERRABLE} == entry["tables"]


def test_connect_with_needs_reads_no_deferred_table(lazy, eager_overlap_table, monkeypatch):
    _, lazy_dir, eager_dir = lazy

    def refuse(root, run_id):
        raise AssertionError(f"completed run {run_id}")

    monkeypatch.setattr(store, "COMPLETE", refuse)
    assert _count(lazy_dir, "kernels", NEEDS) == _count(eager_dir, "kernels") > 0
    assert _count(lazy_dir, "runtime_api", NEEDS) == 0  # left in the export: read as empty
    assert _same_numbers(overlap(lazy_dir), eager_overlap_table)
    assert _entry(lazy_dir)["deferred"] == list(DEFERRABLE)
    with pytest.raises(AssertionError, match="completed run"):  # a caller that needs one of them completes the run
        store.connect(lazy_dir, needs=["kernels", "nvtx"])


def test_connect_reads_the_deferred_tables_as_an_eager_ingest_wrote_them(lazy, monkeypatch):
    _, lazy_dir, eager_dir = lazy
    for table in DEFERRABLE:
        assert _count(lazy_dir, table) == _count(eager_dir, table) > 0
    entry, eager = _entry(lazy_dir), _entry(eager_dir)
    assert entry["deferred"] == [] and entry["tables"] == eager["tables"]
    lazy_run, eager_run = store.run_dir(lazy_dir, entry["run_id"]), store.run_dir(eager_dir, entry["run_id"])
    assert json.loads((lazy_run / "run.json").read_text())["deferred"] == []
    for table in schema.TABLES:
        if not (eager_run / f"{table}.parquet").exists():
            continue
        got, want = pq.read_table(lazy_run / f"{table}.parquet"), pq.read_table(eager_run / f"{table}.parquet")
        if table == "runs":  # the time of the ingest, and the path of the copy, differ
            got, want = got.drop(["ingested_at", "source_path"]), want.drop(["ingested_at", "source_path"])
        assert got.equals(want), table
    assert not [p for p in lazy_run.iterdir() if p.name.startswith(".")]  # no staging left behind
    monkeypatch.setattr(store, "COMPLETE", None)  # read once: the next connection needs no completion
    assert _count(lazy_dir, "gpu_metrics") == _count(eager_dir, "gpu_metrics")


def test_attribute_of_a_lazy_store_equals_an_eager_one(lazy):
    _, lazy_dir, eager_dir = lazy
    got, want = traceql.attribute(lazy_dir), traceql.attribute(eager_dir)
    assert got.kernels.num_rows > 0 and got.summary.num_rows > 0
    assert got.kernels.equals(want.kernels)
    assert got.summary.equals(want.summary)
    assert _entry(lazy_dir)["deferred"] == []
    # the GPU metrics were read from the export: the kernels' isolated SM activity is known
    assert any(v is not None for v in got.kernels.column("sm_active_pct_iso").to_pylist())


def _change(export: Path, how: str) -> str:
    """Change the export as ``how`` says; the state the refusal names."""
    if how == "append":
        with open(export, "ab") as f:
            f.write(b"\0")
    elif how == "touch":
        st = export.stat()
        os.utime(export, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    elif how == "delete":
        export.unlink()
        return "missing"
    return "changed"


def test_a_touched_export_of_the_same_bytes_is_read(lazy):
    """A new modification time alone (a copy, a touch) is not a change: the bytes hash to the run's sha256."""
    export, lazy_dir, eager_dir = lazy
    _change(export, "touch")
    store.connect(lazy_dir).close()
    assert _entry(lazy_dir)["deferred"] == []
    for table in DEFERRABLE:
        assert _count(lazy_dir, table) == _count(eager_dir, table)


@pytest.mark.parametrize("how", ["append", "delete"])
def test_a_changed_export_is_refused(how, lazy, eager_overlap_table):
    export, lazy_dir, _ = lazy
    state = _change(export, how)
    with pytest.raises(BadInputError, match="traceql ingest") as exc:
        store.connect(lazy_dir)
    assert f"is {state} since" in str(exc.value) and str(export) in str(exc.value)
    if how == "append":  # the CLI: the same message, exit code 2 (one case: each run of the CLI costs a second)
        rc, out, err = run_cli("sql", lazy_dir, "SELECT count(*) FROM runtime_api")
        assert rc == 2, (out, err)
        assert "traceql ingest" in err and f"is {state} since" in err and "Traceback" not in err and out == ""
    entry = _entry(lazy_dir)  # nothing half-read
    assert entry["deferred"] == list(DEFERRABLE)
    assert not any((store.run_dir(lazy_dir, entry["run_id"]) / f"{t}.parquet").exists() for t in DEFERRABLE)
    if how == "delete":  # what needs nothing of the export still works
        assert _same_numbers(overlap(lazy_dir), eager_overlap_table)


def test_a_changed_parquet_directory_export_is_refused(tmp_path):
    export = tmp_path / "contention_parquetdir"
    shutil.copytree(TRACES["h200_contention_parquetdir"], export)
    (info,) = traceql.ingest(export, tmp_path / "lazy", defer=DEFERRABLE)
    assert info.deferred == list(DEFERRABLE)
    _change(export / "CUPTI_ACTIVITY_KIND_RUNTIME.parquet", "touch")
    with pytest.raises(BadInputError, match="traceql ingest"):
        store.connect(tmp_path / "lazy")


def test_an_xz_trace_is_not_deferred(tmp_path):
    (info,) = traceql.ingest(H200 / "overlap.sqlite.xz", tmp_path / "run", defer=DEFERRABLE)
    assert info.deferred == [] and info.export == {}
    entry = _entry(tmp_path / "run")
    assert not entry.get("deferred") and not entry.get("export")
    assert all(entry["tables"][t] > 0 for t in DEFERRABLE)
    assert (store.run_dir(tmp_path / "run", info.run_id) / "runtime_api.parquet").exists()


def test_only_deferrable_tables_are_deferred(tmp_path, sqlite_export):
    with pytest.raises(UsageError, match="cannot defer kernels"):
        traceql.ingest(sqlite_export("h100_known_cause"), tmp_path / "run", defer=["kernels"])
    assert not store.is_store(tmp_path / "run")


# -- the CLI ----------------------------------------------------------------------------------------------------------



def test_cli_prints_a_row_per_device(overlap_sqlite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table's columns unwrapped
    rc, out, err = cli("overlap", overlap_sqlite)
    assert rc == 0, err
    # columns stand two spaces apart at least (a cell holds single spaces only)
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if overlap_sqlite.name in line]
    want = overlap(overlap_sqlite).to_pylist()
    assert [r[1] for r in rows] == [str(w["device_id"]) for w in want] == ["0", "1"]
    for r, w in zip(rows, want, strict=True):
        assert r[2] == f"{w['span_ns'] / 1e6:.1f}"
        assert r[-1] == f"{w['compute_kernels']}/{w['comm_kernels']}"


def test_cli_missing_input(tmp_path):
    """In a process of its own, as a user runs it: exit code 2, the message, no traceback."""
    rc, out, err = run_cli("overlap", tmp_path / "absent.sqlite")
    assert rc == 2 and out == ""
    assert "absent.sqlite: no such file" in err and "Traceback" not in err


def test_cli_keep_leaves_a_run_directory_that_reads_the_rest_later(overlap_sqlite, overlap_run, tmp_path):
    """``--keep`` with ``-f json``: the library's rows, and a lazy run directory that ``traceql sql`` completes."""
    keep = tmp_path / "keep"
    rc, out, err = cli("overlap", overlap_sqlite, "--keep", keep, "-f", "json")
    assert rc == 0, err
    assert json.loads(out) == overlap(overlap_sqlite).to_pylist()  # JSON numbers as Python's: floats exactly
    assert _entry(keep)["deferred"] == list(DEFERRABLE)
    rc, out, err = cli("sql", keep, "SELECT count(*) AS n FROM runtime_api", "--format", "json")
    assert rc == 0, err
    assert json.loads(out) == [{"n": _count(overlap_run, "runtime_api")}]
    assert _entry(keep)["deferred"] == []


# -- bugs of the first version, fixed -------------------------------------------------------------------------------

STALE_RUN_STAYS = "the refusal's advice (`traceql ingest TRACE -o ROOT`) does not repair the store: the run with the " \
                  "stale export stays in it (a touched export: the same run, 'already' ingested)"
KEEP_READS_ALL = "overlap(..., workdir=DIR) returns the rows of every run DIR holds, not those of its inputs"
DEDUP_COLUMNS = "read_intervals deduplicates on its few columns, ingest on every column: two records alike but " \
                "for their stream count once raw, twice from a store"
NCU_UNNAMED = "read_intervals never sees the format 'nsys-ncu' (_resolve_input does not return it): an .ncu-rep is " \
              "read as SQLite, and the error names a temporary file"


def test_following_the_refusal_repairs_the_store(lazy):
    export, lazy_dir, _ = lazy
    stale = _entry(lazy_dir)["run_id"]
    _change(export, "append")
    with pytest.raises(BadInputError):
        store.connect(lazy_dir)
    (info,) = traceql.ingest(export, lazy_dir)  # what the message says to run
    assert any(f"removed run {stale}" in w for w in info.warnings)
    assert list(store.read_manifest(lazy_dir)["runs"]) == [info.run_id]
    assert not store.run_dir(lazy_dir, stale).exists()
    assert _count(lazy_dir, "runtime_api") > 0


def test_a_kept_directory_answers_for_the_inputs_only(sqlite_export, tmp_path):
    traceql.ingest(sqlite_export("h200_overlap"), tmp_path / "keep", defer=DEFERRABLE)  # a run kept before
    second = overlap(sqlite_export("h100_known_cause"), workdir=tmp_path / "keep")
    assert second.equals(overlap(sqlite_export("h100_known_cause")))


def test_raw_and_store_count_the_same_rows(sqlite_export, tmp_path):
    db = _writable_copy(sqlite_export("h100_known_cause"), tmp_path / "k.sqlite")
    con = sqlite3.connect(db)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    row = dict(zip(cols, con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1 OFFSET 100")
                   .fetchone(), strict=True))
    row["streamId"] += 1  # the same launch record on another stream (e.g. two nodes of one CUDA graph launch)
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [row[c] for c in cols])
    con.commit()
    con.close()
    assert overlap(db).equals(overlap(db, workdir=tmp_path / "keep"))


def test_an_ncu_report_is_refused_by_name():
    trace = H200 / "kernels.ncu-rep.xz"
    with pytest.raises(BadInputError) as exc:
        overlap(trace)
    assert str(trace) in str(exc.value) and "Nsight Compute" in str(exc.value)


def test_sql_reads_the_deferred_tables_it_needs_only(lazy):
    """`traceql sql` over a lazily ingested run reads from the export the tables the query names, itself or through
    the views it names, and no others."""
    from traceql.sqlcmd import query

    export, lazy_dir, eager_dir = lazy
    kernels = query([lazy_dir], "SELECT count(*) AS n FROM kernels").to_pylist()
    assert kernels == [{"n": _count(eager_dir, "kernels")}]
    assert _entry(lazy_dir)["deferred"] == list(DEFERRABLE)  # nothing read from the export
    assert query([lazy_dir], "SELECT count(*) AS n FROM device_overlap").to_pylist()[0]["n"] > 0
    assert _entry(lazy_dir)["deferred"] == list(DEFERRABLE)
    calls = query([lazy_dir], "SELECT count(*) AS n FROM Runtime_API").to_pylist()
    assert calls == [{"n": _count(eager_dir, "runtime_api")}]
    assert _entry(lazy_dir)["deferred"] == []


def test_a_completion_that_cannot_write_leaves_the_run_as_it_was(lazy, monkeypatch):
    """A full disk while the deferred tables are read: refused as bad input naming the run's folder, no partial file
    left, the run still lazy (the next query tries again)."""
    import errno

    ingest_module = sys.modules["traceql.ingest"]  # traceql.ingest is also the function
    export, lazy_dir, _ = lazy
    entry = _entry(lazy_dir)
    folder = store.run_dir(lazy_dir, entry["run_id"])
    before = sorted(p.name for p in folder.iterdir())

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ingest_module, "write_streamed", full)
    with pytest.raises(BadInputError, match="cannot write here") as exc:
        store.connect(lazy_dir)
    assert str(folder) in str(exc.value) and "free space" in str(exc.value)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert _entry(lazy_dir)["deferred"] == list(DEFERRABLE)
    monkeypatch.undo()
    assert _count(lazy_dir, "gpu_metrics") > 0
