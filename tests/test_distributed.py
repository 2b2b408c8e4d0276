"""One run as the unit of work: executors (local processes, a Dask cluster), the store as an index of runs.

A real ``dask.distributed.LocalCluster`` of processes ingests real rank files (the bundled traces, and a decompressed
copy, which is another file and so another run) and attributes them with synthetic runs beside them; the results
must equal the local executor's and the one-connection computation's byte for byte. Workers are killed mid-ingest:
the job completes (Dask runs the unit again) or, when the scheduler allows no failure, names the lost rank and
leaves nothing half-written.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import duckdb
import pytest
from conftest import H200, run_cli
from synthetic import NCCL_NAME, make_store

import traceql
from traceql import executor, store
from traceql.attribute import attribute
from traceql.errors import UsageError

distributed = pytest.importorskip("distributed")

RANK_FILES = ("contention.sqlite.xz", "train_ddp.sqlite.xz", "known_cause_6144.sqlite.xz")


@pytest.fixture(scope="module")
def rank_files(tmp_path_factory) -> list[Path]:
    """Rank files: three real traces, a decompressed copy of one of them, and two bad ones."""
    d = tmp_path_factory.mktemp("ranks")
    files = [H200 / name for name in RANK_FILES]
    copy = d / "contention_copy.sqlite"
    with lzma.open(H200 / "contention.sqlite.xz") as src, open(copy, "wb") as dst:
        shutil.copyfileobj(src, dst)
    (d / "empty.sqlite").write_bytes(b"")
    (d / "notes.sqlite").write_text("not an export")
    return [*files, copy, d / "empty.sqlite", d / "notes.sqlite"]


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory) -> Path:
    """Two synthetic runs (a GEMM slowed beside an all-reduce, a copy beside a kernel) with exact known facts."""
    root = tmp_path_factory.mktemp("synthetic") / "store"
    iso = [dict(start_ns=i * 10_000, end_ns=i * 10_000 + 1_000, name="gemm", ctas=132) for i in range(8)]
    ovl = [dict(start_ns=100_000 + i * 10_000, end_ns=100_000 + i * 10_000 + 1_500, name="gemm", ctas=132)
           for i in range(8)]
    comm = [dict(start_ns=100_000, end_ns=180_000, name=NCCL_NAME, kind="comm", ctas=16, stream_id=9)]
    make_store(root, run_id="5e7e7e7e00000010", kernels=iso + ovl + comm)
    make_store(root, run_id="5e7e7e7e00000011", kernels=iso + ovl,
               memcpy=[dict(start_ns=100_000, end_ns=180_000, is_peer=True)])
    return root


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as c:
        yield c


def dask_spec(cluster) -> str:
    return "dask://" + cluster.scheduler_address.removeprefix("tcp://")


def ingest_all(files, out, ex) -> tuple[list, list[str]]:
    failed: list[str] = []

    def progress(result, trace):
        if isinstance(result, Exception):
            failed.append(f"{trace.name}: {result}")

    infos = traceql.ingest(files, out, on_error="skip", progress=progress, executor=ex)
    return infos, sorted(failed)


def test_executor_spec():
    assert executor.parse(None) == executor.Executor("local", 1)
    assert executor.parse(None, jobs=3) == executor.Executor("local", 3)
    assert executor.parse("local:4") == executor.Executor("local", 4)
    assert executor.parse("dask://sched:8786") == executor.Executor("dask", 0, "tcp://sched:8786")
    assert executor.parse("tls://sched:8786").address == "tls://sched:8786"
    assert str(executor.parse("dask://sched:8786")) == "dask://sched:8786"
    for bad in ("local:0", "local:x", "spark://x", "dask://"):
        with pytest.raises(UsageError):
            executor.parse(bad)


def test_local_cluster_equals_local_executor(tmp_path, rank_files, synthetic_runs, cluster):
    spec = dask_spec(cluster)
    on_dask, failed_dask = ingest_all(rank_files, tmp_path / "dask", spec)
    local, failed_local = ingest_all(rank_files, tmp_path / "local", "local:2")
    # every failed rank is named, the others finish
    assert failed_dask == failed_local and [f.split(":")[0] for f in failed_dask] == ["empty.sqlite", "notes.sqlite"]
    assert [i.run_id for i in on_dask] == [i.run_id for i in local] and len({i.run_id for i in local}) == 4
    index_dask, index_local = (store.read_manifest(tmp_path / d) for d in ("dask", "local"))
    # the same runs, files and rows; the sha256 of each run's runs.parquet differs (it holds when it was ingested)
    for index in (index_dask, index_local):
        for entry in index["runs"].values():
            entry.get("digests", {}).pop("runs", None)
    assert index_dask == index_local and len(index_dask["runs"]) == 4
    # the client wrote the index; the workers wrote only their runs (each complete, with its run.json)
    raw = json.loads((tmp_path / "dask" / "manifest.json").read_text())
    assert sorted(raw["runs"]) == sorted(index_dask["runs"])
    assert all((store.run_dir(tmp_path / "dask", rid) / "run.json").is_file() for rid in raw["runs"])
    assert not list((tmp_path / "dask").glob(".tmp-*"))

    inputs = {name: [tmp_path / name, synthetic_runs] for name in ("dask", "local")}
    # one connection over every run, on one thread as the units run (multithreaded float sums may change a last digit)
    reference = attribute(inputs["local"], con=duckdb.connect(config={"threads": 1}))
    results = {"local:2": attribute(inputs["local"], executor="local:2"),
               "dask": attribute(inputs["dask"], executor=spec)}
    for name, result in [("reference", reference), *results.items()]:
        result.write(tmp_path / f"out-{name}")
    expected = (tmp_path / "out-reference" / "attribution.json").read_bytes()
    for name in results:
        assert (tmp_path / f"out-{name}" / "attribution.json").read_bytes() == expected, name
        for table in ("kernels.parquet", "summary.parquet"):
            assert (tmp_path / f"out-{name}" / table).read_bytes() == \
                (tmp_path / "out-reference" / table).read_bytes(), (name, table)
    runs = {r["run_id"] for r in reference.to_json()["runs"]}
    assert len(runs) == 6 and {"5e7e7e7e00000010", "5e7e7e7e00000011"} <= runs
    kernels = reference.to_json()["kernels"]
    assert {r["run_id"] for r in kernels} == runs
    assert len({r["group_id"] for r in kernels}) == len(kernels)  # numbered across runs, as by one connection
    gemm = [r for r in kernels if r["run_id"] == "5e7e7e7e00000010" and r["name"] == "gemm"]
    assert len(gemm) == 1 and gemm[0]["slowdown"] == pytest.approx(0.5)  # 1500 ns beside the all-reduce, 1000 alone


def _kill_first_worker_mid_ingest(out: Path, killed: list[int], stop: threading.Event) -> None:
    """Kill (SIGKILL) the first worker process seen writing a run: its staging folder names its pid."""
    while not stop.is_set() and not killed:
        for folder in out.glob(".tmp-*"):
            m = re.match(r"\.tmp-(\d+)@", folder.name)
            if m and int(m.group(1)) != os.getpid():
                os.kill(int(m.group(1)), signal.SIGKILL)
                killed.append(int(m.group(1)))
                return
        time.sleep(0.01)


def _ingest_while_killing(files, out, spec) -> tuple[list, list[str], list[int]]:
    killed: list[int] = []
    stop = threading.Event()
    out.mkdir(parents=True)
    killer = threading.Thread(target=_kill_first_worker_mid_ingest, args=(out, killed, stop), daemon=True)
    killer.start()
    try:
        infos, failed = ingest_all(files, out, spec)
    finally:
        stop.set()
        killer.join()
    return infos, failed, killed


def _assert_nothing_half_written(out: Path, infos) -> None:
    runs = store.read_manifest(out)["runs"]
    assert sorted(runs) == sorted(i.run_id for i in infos)
    assert sorted(store.run_id_of(p) for p in (out / "runs").iterdir()) == sorted(runs)
    for rid in runs:
        assert (store.run_dir(out, rid) / "run.json").is_file()
    con = traceql.connect(out, views=False)
    counts = dict(con.sql("SELECT run_id, count(*) FROM kernels GROUP BY 1").fetchall())
    assert counts == {i.run_id: i.tables["kernels"] for i in infos}
    # the killed worker's staging folder is the only leftover, and the next ingest on this host removes it
    assert len(list(out.glob(".tmp-*"))) <= 1
    store.staging_dir(out)
    assert len(list(out.glob(".tmp-*"))) == 1  # only the new one, this live process's


def test_killed_worker_is_retried(tmp_path, rank_files, cluster):
    good = rank_files[:4]
    infos, failed, killed = _ingest_while_killing(good, tmp_path / "out", dask_spec(cluster))
    assert killed, "no worker was seen mid-ingest"
    assert failed == [] and len(infos) == 4  # Dask ran the lost unit again on a worker that lives
    _assert_nothing_half_written(tmp_path / "out", infos)


def test_killed_worker_without_retries_fails_cleanly(tmp_path, rank_files):
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as c:
        infos, failed, killed = _ingest_while_killing(rank_files[:4], tmp_path / "out", dask_spec(c))
    assert killed
    # every unit the dead worker held (the running one, and one it had queued) is named; the rest finished
    assert failed and all("Dask workers running it died" in f for f in failed)
    assert len(infos) + len(failed) == 4 and infos
    _assert_nothing_half_written(tmp_path / "out", infos)


def test_reader_takes_published_runs_and_names_those_being_written(tmp_path, capsys):
    out = tmp_path / "store"
    traceql.ingest(H200 / "contention_parquetdir", out)
    (rid,) = store.read_manifest(out)["runs"]
    # a worker of another host published a run, but its index update has not come (or was lost)
    (out / "manifest.json").write_text(json.dumps(store.new_manifest()))
    assert list(store.read_manifest(out)["runs"]) == [rid]
    assert traceql.connect(out, views=False).sql("SELECT count(*) FROM runs").fetchall() == [(1,)]
    # a run folder still being written (no run.json yet) is named and left out
    partial = store.run_dir(out, "00000000000000aa")
    partial.mkdir()
    shutil.copy(store.run_dir(out, rid) / "kernels.parquet", partial / "kernels.parquet")
    assert list(store.read_manifest(out)["runs"]) == [rid]
    assert "00000000000000aa" in capsys.readouterr().err
    # the index is rebuilt from the runs' own run.json
    assert list(store.reindex(out)["runs"]) == [rid]
    assert list(json.loads((out / "manifest.json").read_text())["runs"]) == [rid]


def test_cli_names_every_failed_rank(tmp_path, rank_files):
    rc, _, err = run_cli("ingest", rank_files[0], rank_files[4], rank_files[5], "-o", tmp_path / "out",
                         "--executor", "local:2", "--on-error", "skip")
    assert rc == 2
    assert f"2 of 3 trace(s) failed: {rank_files[4]}, {rank_files[5]}" in err
    assert len(store.read_manifest(tmp_path / "out")["runs"]) == 1
    rc, _, err = run_cli("attribute", tmp_path / "out", "--executor", "spark://x")
    assert rc == 2 and "--executor 'spark://x'" in err


def test_report_on_a_local_cluster_equals_local(tmp_path, rank_files, cluster):
    from traceql.report import report

    out = tmp_path / "runs"
    traceql.ingest(rank_files[:2], out)
    bad = tmp_path / "bad"  # a run without kernels (a copy beside nothing): skipped, and named, by every executor
    make_store(bad, run_id="5e7e7e7e00000020", memcpy=[dict(start_ns=0, end_ns=1000)])
    results = {ex or "default": report([out, bad], recipe="kernels", on_error="skip", executor=ex)
               for ex in (None, "local:2", dask_spec(cluster))}
    reference = results.pop("default")
    assert [s["run_id"] for s in reference.skipped] == ["5e7e7e7e00000020"]
    assert sum(t.num_rows for s in reference.sections for t in s.tables.values()) > 0
    for name, result in results.items():
        assert result.skipped == reference.skipped, name
        assert result.runs.equals(reference.runs), name
        for mine, ref in zip(result.sections, reference.sections, strict=True):
            assert mine.tables.keys() == ref.tables.keys()
            for q in ref.tables:
                assert mine.tables[q].equals(ref.tables[q]), (name, q)
            assert [(label, sorted(t)) for label, t in mine.per_run] == [(label, sorted(t)) for label, t in ref.per_run]


def test_url_inputs(tmp_path, cluster):
    """Traces named by URL: fetched by the unit that reads them, recorded by their URL; file:// URLs are paths."""
    fsspec = pytest.importorskip("fsspec")
    from traceql.errors import MissingInputError

    mem = fsspec.filesystem("memory")
    mem.pipe("/ranks/contention.sqlite.xz", (H200 / "contention.sqlite.xz").read_bytes())
    for f in sorted((H200 / "contention_parquetdir").iterdir()):
        mem.pipe(f"/ranks/contention_parquetdir/{f.name}", f.read_bytes())
    urls = ["memory://ranks/contention.sqlite.xz", "memory://ranks/contention_parquetdir"]
    infos = traceql.ingest(urls, tmp_path / "mem")
    local = traceql.ingest([H200 / "contention.sqlite.xz", H200 / "contention_parquetdir"], tmp_path / "local")
    assert [i.run_id for i in infos] == [i.run_id for i in local]  # the same bytes, the same runs
    assert [i.source_path for i in infos] == urls
    con = traceql.connect(tmp_path / "mem", views=False)
    assert sorted(r[0] for r in con.sql("SELECT source_path FROM runs").fetchall()) == sorted(urls)
    assert con.sql("SELECT count(*) FROM kernels").fetchall() == \
        traceql.connect(tmp_path / "local", views=False).sql("SELECT count(*) FROM kernels").fetchall()
    assert not list((tmp_path / "mem").glob(".tmp-*"))  # the copies are gone
    with pytest.raises(MissingInputError, match="memory://ranks/nope.sqlite"):
        traceql.ingest("memory://ranks/nope.sqlite", tmp_path / "mem")
    # on the cluster: a file:// URL is a path every worker reads; memory:// is this process's memory, which a worker
    # does not see: that rank fails, named, and the other finishes
    failed: list[str] = []
    on_dask = traceql.ingest([f"file://{H200 / 'contention.sqlite.xz'}", urls[0]], f"file://{tmp_path / 'dask'}",
                             executor=dask_spec(cluster), on_error="skip",
                             progress=lambda r, t: failed.append(f"{t}: {r}") if isinstance(r, Exception) else None)
    assert [i.run_id for i in on_dask] == [local[0].run_id]
    assert len(failed) == 1 and failed[0].startswith(urls[0]) and "no such file or folder" in failed[0]
    assert list(store.read_manifest(tmp_path / "dask")["runs"]) == [local[0].run_id]
