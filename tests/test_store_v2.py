"""The run store's layout 2: Hive-style run folders that other engines read as they are, kernels in (device, time)
order, file sizes recorded at ingest so that opening a store reads no footer of an unchanged file, and the migration
of a store of layout 1 (a real one, written by traceql on a GPU machine: ``tests/data/store_v1``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from conftest import H200, long_metrics, run_cli, without_digests

import traceql
from traceql import store
from traceql.store import schema
from traceql.store.signature import PARTS, signature_ids
from traceql.store.writer import KERNEL_ORDER

V1 = Path(__file__).parent / "data" / "store_v1"


@pytest.fixture()
def v1_store(tmp_path) -> Path:
    dst = tmp_path / "v1"
    shutil.copytree(V1, dst)
    return dst


def _same_tables(folder: Path, migrated: dict[str, int], before: dict[str, int]) -> None:
    """The rows a migrated run records per table: those it had, but GPU metrics' (stored wide: a row per sample)."""
    assert {t: n for t, n in migrated.items() if t != "gpu_metrics"} == \
        {t: n for t, n in before.items() if t != "gpu_metrics"}
    wide = pq.read_table(folder / "gpu_metrics.parquet")
    assert migrated["gpu_metrics"] == wide.num_rows and long_metrics(wide).num_rows == before["gpu_metrics"]
    assert wide.num_rows < before["gpu_metrics"] or before["gpu_metrics"] == 0


def _rows(path: Path | pa.Table) -> list[tuple]:
    """A file's (or table's) rows as a sorted list (order-free comparison)."""
    table = pq.read_table(path) if isinstance(path, Path) else path
    return sorted(tuple(map(repr, r.values())) for r in table.to_pylist())


def test_layout_1_is_refused_with_the_command_that_migrates_it(v1_store):
    with pytest.raises(traceql.SchemaVersionError, match=f"traceql migrate {v1_store}"):
        traceql.connect(v1_store)
    rc, out, err = run_cli("sql", v1_store, "SELECT count(*) FROM kernels")
    assert rc == 2 and "traceql migrate" in err and "Traceback" not in err
    rc, _, err = run_cli("ingest", H200 / "contention.sqlite.xz", "-o", v1_store)  # nor written into
    assert rc == 2 and "traceql migrate" in err
    assert sorted(p.name for p in (v1_store / "runs").iterdir()) == sorted(json.loads(
        (V1 / "manifest.json").read_text())["runs"])  # untouched


def test_migrate_a_real_layout_1_store(v1_store):
    before = {rid: {f.stem: _rows(f) for f in (v1_store / "runs" / rid).glob("*.parquet")}
              for rid in json.loads((v1_store / "manifest.json").read_text())["runs"]}
    rc, out, err = run_cli("migrate", v1_store)
    assert rc == 0, err
    assert "2 run(s) migrated" in out + err
    manifest = json.loads((v1_store / "manifest.json").read_text())
    assert manifest["layout"] == store.LAYOUT and sorted(manifest["runs"]) == sorted(before)
    old_index = json.loads((V1 / "manifest.json").read_text())["runs"]
    for rid, entry in old_index.items():  # what the old index said of each run (labels added by collect) is kept
        assert {k: manifest["runs"][rid].get(k) for k in entry if k != "tables"} == \
            {k: v for k, v in entry.items() if k != "tables"}
        _same_tables(store.run_dir(v1_store, rid), manifest["runs"][rid]["tables"], entry["tables"])
    assert any(e.get("labels") for e in old_index.values())
    for rid, tables in before.items():
        folder = store.run_dir(v1_store, rid)
        assert folder.name == f"run_id={rid}"
        info = json.loads((folder / "run.json").read_text())
        assert info["files"] == {t: (folder / f"{t}.parquet").stat().st_size for t in info["tables"]}
        for table, rows in tables.items():
            if table != "runs":  # the same rows, whatever their order, and the signature ids ingest gives
                migrated = pq.read_table(folder / f"{table}.parquet")
                if table in PARTS:
                    assert migrated.column("sig").to_pylist() == signature_ids(table, migrated).to_pylist()
                    assert migrated.column("sig").null_count == 0
                    migrated = migrated.drop(["sig"])
                if table == "gpu_metrics":  # stored wide: the same values, a row per GPU and sample time
                    keys = list(zip(migrated.column("device_id").to_pylist(), migrated.column("ts_ns").to_pylist(),
                                    strict=True))
                    assert len(set(keys)) == len(keys)
                    migrated = long_metrics(migrated)
                assert _rows(migrated) == rows, (rid, table)
        kernels = pq.read_table(folder / "kernels.parquet")
        assert kernels.equals(kernels.sort_by(KERNEL_ORDER))
        runs = pq.read_table(folder / "runs.parquet")
        assert runs.schema.names == schema.TABLES["runs"].names  # the column added later, as NULL
        schema.check_file(folder / "runs.parquet", "runs")
    con = traceql.connect(v1_store)
    assert con.sql("SELECT count(*) FROM kernels").fetchall()[0][0] == sum(
        len(t.get("kernels", [])) for t in before.values())
    rc, out, err = run_cli("migrate", v1_store)  # once is enough
    assert rc == 0 and "already in the current layout" in out + err


def test_an_interrupted_migration_is_finished_by_running_it_again(v1_store):
    calls = []

    def stop_after_first(done, total, run_id):
        calls.append(run_id)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.migrate(v1_store, stop_after_first)
    names = sorted(p.name for p in (v1_store / "runs").iterdir())
    assert names[0].startswith("run_id=") != names[1].startswith("run_id=")  # one run each way, none half
    with pytest.raises(traceql.SchemaVersionError, match="traceql migrate"):
        traceql.connect(v1_store)  # the index still says layout 1 until every run is done
    assert store.migrate(v1_store) == 1
    assert all(store.run_id_of(p) for p in (v1_store / "runs").iterdir())
    assert len(store.read_manifest(v1_store)["runs"]) == 2


def test_other_engines_read_the_store_as_it_is(two_run_store):
    """DuckDB, polars and pyarrow read a table of every run by Hive partition discovery; the rows per run are those
    traceql's views give."""
    pl = pytest.importorskip("polars")
    out, _ = two_run_store
    want = dict(traceql.connect(out, views=False).sql("SELECT run_id, count(*) FROM kernels GROUP BY 1").fetchall())
    assert len(want) == 2 and all(want.values())
    glob = str(out / "runs" / "*" / "kernels.parquet")
    got_duckdb = dict(duckdb.sql(f"SELECT run_id, count(*) FROM read_parquet('{glob}', hive_partitioning = true, "
                                 "hive_types = {'run_id': VARCHAR}) GROUP BY 1").fetchall())
    got_polars = dict(pl.scan_parquet(glob, hive_partitioning=True).group_by("run_id").len().collect().rows())
    files = sorted(str(p) for p in (out / "runs").glob("*/kernels.parquet"))
    dataset = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=str(out / "runs"))
    counts = dataset.to_table(columns=["run_id"]).group_by("run_id").aggregate([([], "count_all")])
    got_pyarrow = dict(zip(counts["run_id"].to_pylist(), counts["count_all"].to_pylist(), strict=True))
    assert got_duckdb == got_polars == got_pyarrow == want


def test_kernels_are_written_in_device_and_time_order(two_run_store):
    out, ids = two_run_store
    for rid in ids.values():
        kernels = pq.read_table(store.run_dir(out, rid) / "kernels.parquet")
        assert kernels.num_rows and kernels.equals(kernels.sort_by(KERNEL_ORDER))


def test_open_reads_the_footer_of_a_changed_file_only(tmp_path, two_run_store, monkeypatch):
    out = tmp_path / "s"
    shutil.copytree(two_run_store[0], out)
    checked: list[str] = []
    real = schema.check_file
    monkeypatch.setattr(schema, "check_file", lambda p, t=None: checked.append(Path(p).name) or real(p, t))
    traceql.connect(out, views=False)
    assert checked == []  # every file is the one its run recorded
    rid = sorted(store.read_manifest(out)["runs"])[0]
    victim = store.run_dir(out, rid) / "devices.parquet"
    table = pq.read_table(victim)
    pq.write_table(table.append_column("extra", pa.nulls(table.num_rows)), victim)  # another file, another size
    with pytest.raises(traceql.BadInputError, match="devices.parquet: its content is not the one"):
        traceql.connect(out, views=False)  # its run recorded the sha256 of the file it wrote
    checked.clear()
    without_digests(out)  # a store of an earlier traceql, which recorded sizes only
    traceql.connect(out, views=False)
    assert checked == ["devices.parquet"]
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(traceql.BadInputError, match="devices.parquet"):
        traceql.connect(out, views=False)


@pytest.fixture(scope="module")
def two_run_store(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("v2") / "runs"
    infos = traceql.ingest([H200 / "contention.sqlite.xz", H200 / "overlap.sqlite.xz"], out)
    return out, {i.source_path: i.run_id for i in infos}


def test_migrate_takes_the_index_entry_of_a_run_without_run_json(v1_store):
    """Stores written before each run had its own run.json: the index is the record of their runs."""
    entries = json.loads((v1_store / "manifest.json").read_text())["runs"]
    for f in v1_store.glob("runs/*/run.json"):
        f.unlink()
    assert store.migrate(v1_store) == 2
    migrated = store.read_manifest(v1_store)["runs"]
    assert sorted(migrated) == sorted(entries)
    for rid, entry in entries.items():
        assert {k: migrated[rid][k] for k in ("source_path", "sha256", "format")} == \
            {k: entry[k] for k in ("source_path", "sha256", "format")}
        _same_tables(store.run_dir(v1_store, rid), migrated[rid]["tables"], entry["tables"])
    assert traceql.connect(v1_store).sql("SELECT count(*) FROM kernels").fetchall()[0][0] == 70
    assert store.migrate(v1_store) is None


@pytest.mark.parametrize("view", ["_activity_occurrence", "_activity_groups"])
def test_launch_ranges_are_matched_within_each_run(tmp_path, view):
    """Runs of one program share thread and process ids: a plan that matched NVTX ranges to launches on the thread
    alone crossed every run's ranges (256 such runs took more than 10 minutes and 20 GiB instead of seconds). Every
    join of the plan on the launch scope also joins on the run."""
    from synthetic import launches, make_store

    from traceql import attribution
    from traceql.queries_loader import materialize

    root = tmp_path / "s"
    for i in range(10):  # the smallest store found on which the planner chose the thread-only join
        kernels = [dict(start_ns=1000 * k + 100, end_ns=1000 * k + 600, name="gemm", correlation_id=k + 1)
                   for k in range(100)]
        make_store(root, run_id=f"{i + 1:016x}", kernels=kernels, runtime_api=launches(kernels),
                   nvtx=[dict(start_ns=j * 10_000, end_ns=(j + 1) * 10_000, text="step") for j in range(10)])
    con = traceql.connect(root)
    materialize(con, ("_activity_rows",))  # as prepare() does: the planner then knows its size
    if view == "_activity_groups":
        attribution.group_by_nvtx(con, "step*")
    plan = json.loads(con.sql(f"EXPLAIN (FORMAT JSON) SELECT count(*) FROM {view}").fetchall()[0][1])

    def conditions(node) -> list[str]:
        found = [str((node.get("extra_info") or {}).get("Conditions", ""))] if isinstance(node, dict) else []
        for child in (node.get("children", []) if isinstance(node, dict) else node):
            found += conditions(child)
        return found

    # launches and ranges are matched on their scope (the process or the thread: traceql.launch), and on the run
    on_scope = [c for c in conditions(plan) if "scope_id" in c or "global_tid" in c or "global_pid" in c]
    assert on_scope and all("run_id" in c for c in on_scope), on_scope
    assert con.sql(f"SELECT count(*) FROM {view}").fetchall()[0][0] == 1000


def test_migrate_bad_input_is_named_with_exit_2(tmp_path, v1_store):
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "manifest.json").write_text("{oops")
    cases = {tmp_path / "empty": "not a traceql run directory", tmp_path / "damaged": "unreadable manifest",
             tmp_path / "none": "no such run directory"}
    for path, words in cases.items():
        rc, out, err = run_cli("migrate", path)
        assert rc == 2 and words in err and str(path) in err and "Traceback" not in err, err
    (v1_store / "runs" / "1c86e086c617c6a8" / "devices.parquet").write_bytes(b"PAR1 not parquet")
    rc, out, err = run_cli("migrate", v1_store)  # a damaged file: named, and that run left in layout 1
    assert rc == 2 and "devices.parquet" in err and "Traceback" not in err, err
    assert (v1_store / "runs" / "1c86e086c617c6a8").is_dir()


def test_a_migration_stopped_by_a_full_disk_says_so_and_the_next_one_finishes(tmp_path, v1_store):
    """A write that fails mid-migration (here past the process's file size limit, as on a full disk) is exit 2 with
    what to do, leaves no half-written file, and running the command again finishes: the same store as a migration
    that was never stopped."""
    import resource
    import subprocess
    import sys

    clean = tmp_path / "clean"
    shutil.copytree(V1, clean)
    assert run_cli("migrate", clean)[0] == 0

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 10, 8 << 10))

    done = subprocess.run([sys.executable, "-m", "traceql.cli", "migrate", str(v1_store)], capture_output=True,
                          text=True, timeout=120, preexec_fn=limited)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "ulimit -f" in done.stderr and f"traceql migrate {v1_store}` again" in done.stderr, done.stderr
    assert not list(v1_store.rglob("*.migrating"))
    rc, out, err = run_cli("migrate", v1_store)
    assert rc == 0, err
    for rid in json.loads((clean / "manifest.json").read_text())["runs"]:
        for f in sorted(store.run_dir(clean, rid).glob("*.parquet")):
            assert _rows(store.run_dir(v1_store, rid) / f.name) == _rows(f), f.name
