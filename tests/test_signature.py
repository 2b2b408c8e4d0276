"""Signature ids (``sig``): one 64-bit id per kind of work, written into the store at ingest, the same whoever
writes it (ingest, ``traceql migrate``, a benchmark's writer) and whatever the rows' order or encoding."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import H200, cli_in_process, older_layout, run_cli

import traceql
from traceql import store
from traceql.store import digests, schema
from traceql.store.signature import NULL, PARTS, signature_ids, text_hash


def _kernels(**over) -> pa.Table:
    cols = {"name": ["gemm<float, 128>", "gemm<float, 128>", "softmax", "softmax"],
            "grid_x": [132, 132, 64, 64], "grid_y": [1, 1, 1, 1], "grid_z": [1, 1, 1, 1],
            "block_x": [256, 256, 128, 128], "block_y": [1, 1, 1, 1], "block_z": [1, 1, 1, 1],
            "dynamic_smem_bytes": [0, 0, 1024, 1024]}
    cols.update(over)
    return pa.table({k: pa.array(v, pa.string() if k == "name" else pa.int64()) for k, v in cols.items()})


def _ids(table: str, data: pa.Table) -> list[int]:
    return signature_ids(table, data).to_pylist()


def test_the_same_work_has_the_same_id_and_each_part_tells_work_apart():
    ids = _ids("kernels", _kernels())
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]
    base = _ids("kernels", _kernels())[0]
    for column in PARTS["kernels"][2]:
        changed = _kernels(**{column: [v + 1 if i == 0 else v for i, v in enumerate(_kernels()[column].to_pylist())]})
        assert _ids("kernels", changed)[0] != base, column
    assert _ids("kernels", _kernels(name=["gemm<float, 64>", *_kernels()["name"].to_pylist()[1:]]))[0] != base
    # a missing value is not zero, and the parts' positions count: (x, y) is not (y, x)
    dyn = pa.array([None, 0, 1024, 1024], pa.int64())
    with_null = _ids("kernels", _kernels().set_column(7, "dynamic_smem_bytes", dyn))
    assert with_null[0] != with_null[1] == base
    swapped = _kernels(grid_x=[1, 132, 64, 64], grid_y=[132, 1, 1, 1])
    assert _ids("kernels", swapped)[0] != base
    # a kernel, a copy and a set of the same size are three kinds of work
    copy = _ids("memcpy", pa.table({"copy_kind": ["Device-to-Device"], "bytes": [1024]}))
    sets = _ids("memset", pa.table({"bytes": [1024]}))
    assert len({copy[0], sets[0], base}) == 3
    assert _ids("memcpy", pa.table({"copy_kind": ["Host-to-Device"], "bytes": [1024]})) != copy
    assert _ids("memcpy", pa.table({"copy_kind": pa.array([None], pa.string()), "bytes": [1024]})) != copy


def test_ids_do_not_depend_on_order_encoding_chunks_or_types():
    data = _kernels()
    ids = _ids("kernels", data)
    order = [3, 0, 2, 1]
    assert _ids("kernels", data.take(order)) == [ids[i] for i in order]
    encoded = data.set_column(0, "name", data.column("name").dictionary_encode())
    assert _ids("kernels", encoded) == ids
    chunked = pa.concat_tables([data.slice(0, 1), data.slice(1)])
    assert chunked.column("name").num_chunks == 2 and _ids("kernels", chunked) == ids
    narrow = data.cast(pa.schema([pa.field(f.name, pa.int32() if f.type == pa.int64() else f.type)
                                  for f in data.schema]))
    assert _ids("kernels", narrow) == ids
    # every writer stores the same ids: conform derives the column from the row, whatever stands in its place
    assert schema.conform("kernels", _with_defaults(data)).column("sig").to_pylist() == ids
    wrong = _with_defaults(data).append_column("sig", pa.array([0, None, 7, 7], pa.uint64()))
    assert schema.conform("kernels", wrong).column("sig").to_pylist() == ids


def _with_defaults(data: pa.Table) -> pa.Table:
    n = data.num_rows
    for f in schema.TABLES["kernels"]:
        if f.name not in data.column_names and f.name != "sig":
            data = data.append_column(f, pa.nulls(n, f.type))
    return data


def test_ids_are_stable_across_versions_and_machines():
    # the id is a contract: runs ingested by different traceql versions are compared by it. These values were
    # computed once; a change of the hash fails here (and needs a store layout of its own, with its migration)
    assert text_hash("kernel") == int.from_bytes(hashlib.blake2b(b"kernel", digest_size=8).digest(), "little") \
        == 0x273FEA903E119357
    assert int(NULL) == 0x9E3779B97F4A7C15
    assert _ids("kernels", _kernels())[0] == 0x35C2EC7F82099319
    assert _ids("memset", pa.table({"bytes": [1024]}))[0] == 0xF7A28FB2361D412A


def _layout_2(fresh: Path, old: Path) -> tuple[str, dict]:
    """A copy at ``old`` of the one-run store ``fresh`` as traceql wrote it before signature ids: the same files
    without sig, layout 2; its run id and index."""
    return older_layout(fresh, old, 2, {table: lambda rows: rows.drop(["sig"]) for table in PARTS})


def test_a_store_of_layout_2_is_refused_then_migrated_to_the_ids_ingest_gives(tmp_path, fresh):
    old = tmp_path / "old"
    rid, manifest = _layout_2(fresh, old)
    folder = store.run_dir(old, rid)
    (folder / "run.json").unlink()  # a run the index alone describes (as a benchmark's writer leaves it) is kept

    with pytest.raises(traceql.SchemaVersionError, match=f"layout 2.*traceql migrate {old}"):
        traceql.connect(old)
    rc, out, err = run_cli("attribute", old)
    assert rc == 2 and "traceql migrate" in err and "Traceback" not in err
    rc, out, err = run_cli("migrate", old)
    assert rc == 0 and "1 run(s) migrated" in out + err, err
    for table in PARTS:
        got = pq.read_table(folder / f"{table}.parquet")
        want = pq.read_table(store.run_dir(fresh, rid) / f"{table}.parquet")
        assert got.num_rows == want.num_rows and got.column("sig").equals(want.column("sig")), table
    entry = json.loads((old / "manifest.json").read_text())["runs"][rid]
    assert entry["files"] == {t: (folder / f"{t}.parquet").stat().st_size for t in entry["files"]}
    # the files were rewritten: their sizes and sha256s are the new files' own, the rest of the entry as it was
    assert entry.get("digests", {}) == {t: digests.sha256(folder / f"{t}.parquet") for t in entry.get("digests", {})}
    assert {k: v for k, v in entry.items() if k not in ("files", "digests")} == {
        k: v for k, v in manifest["runs"][rid].items() if k not in ("files", "digests")}
    assert store.read_run_info(folder)["files"] == entry["files"]
    results = [run_cli("attribute", d, "--format", "json") for d in (fresh, old)]
    assert results[0][0] == results[1][0] == 0
    assert json.loads(results[0][1])["kernels"] == json.loads(results[1][1])["kernels"]


def test_queries_group_by_the_stored_id(tmp_path):
    """The names of each signature (signatures) and the trace's launch shapes Nsight Compute matches (ncu_match)
    come from the stored ids: one row per id, with the names and shapes of its kernels."""
    traceql.ingest(H200 / "overlap.sqlite.xz", tmp_path / "run")
    con = traceql.connect(tmp_path / "run")
    per_shape = con.sql("""
        SELECT count(*), count(DISTINCT sig) FROM (SELECT DISTINCT sig, name, grid_x, grid_y, grid_z, block_x, block_y,
               block_z, dynamic_smem_bytes FROM kernels)""").fetchall()[0]
    assert per_shape[0] == per_shape[1] > 1
    names = con.sql("""
        SELECT count(*) FROM signatures s JOIN (SELECT DISTINCT sig, name, short_name,
               concat_ws('x', grid_x, grid_y, grid_z) AS grid, concat_ws('x', block_x, block_y, block_z) AS block,
               dynamic_smem_bytes FROM kernels) k USING (sig)
        WHERE s.activity = 'kernel' AND s.name = k.name AND s.short_name = k.short_name AND s.grid = k.grid
              AND s.block = k.block AND s.dynamic_smem_bytes IS NOT DISTINCT FROM k.dynamic_smem_bytes""").fetchall()
    assert names[0][0] == per_shape[1]
    counts = con.sql("""SELECT (SELECT count(DISTINCT sig) FROM memset), count(*) FILTER (activity = 'memset'),
                               count(*), count(DISTINCT sig) FROM signatures""").fetchall()[0]
    assert counts[0] == counts[1] > 0 and counts[2] == counts[3] == per_shape[1] + counts[1]
    assert con.sql("SELECT count(*) FROM _signatures JOIN signatures USING (sig, name, short_name)").fetchall()[0][0] \
        == counts[2]
    match = con.sql("SELECT count(*), count(DISTINCT (run_id, device_id, sig)), sum(n) FROM ncu_match").fetchall()[0]
    assert match[0] == match[1] and match[2] == con.sql("SELECT count(*) FROM kernels").fetchall()[0][0]
    ids = np.array(con.sql("SELECT sig FROM kernels").fetchnumpy()["sig"], dtype=np.uint64)
    assert (ids != 0).all()


def test_the_bundled_stores_hold_the_ids_of_today():
    """A bundled store written before a change of the hash would disagree with every fresh ingest."""
    suite = H200 / "suite"
    checked = 0
    for table in PARTS:
        for f in sorted((suite / "runs").glob(f"*/{table}.parquet")):
            rows = pq.read_table(f)
            assert rows.column("sig").to_pylist() == signature_ids(table, rows).to_pylist(), f
            checked += rows.num_rows
    assert checked > 1000


def test_a_store_of_layout_2_at_a_url_is_migrated_where_it_is(tmp_path, fresh):
    """A store at a URL (object stores have no rename) is migrated in place: its kernels, copies and sets get the ids
    a fresh ingest gives, its run.json and index the new sizes of those files and the recorded ones of the others."""
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    old = tmp_path / "old"
    rid, _ = _layout_2(fresh, old)
    url = f"memory://traceql-test-{tmp_path.name}/store"
    mem.put(str(old), url.removeprefix("memory://"), recursive=True)
    try:
        rc, _, err = cli_in_process("sql", url, "SELECT 1")
        assert rc == 2 and f"traceql migrate {url}" in err, err
        rc, out, err = cli_in_process("migrate", url)
        assert rc == 0 and "1 run(s) migrated" in out + err, err
        folder = f"{url.removeprefix('memory://')}/runs/run_id={rid}"
        info = json.loads(mem.cat_file(f"{folder}/run.json"))
        assert info["files"] == {t: mem.size(f"{folder}/{t}.parquet") for t in info["tables"]}
        entry = json.loads(mem.cat_file(f"{url.removeprefix('memory://')}/manifest.json"))["runs"][rid]
        assert entry["files"] == info["files"]
        con = traceql.connect(fresh)
        want = con.sql("SELECT sig FROM kernels ORDER BY ALL").fetchall()
        from traceql.store import remote

        assert remote.connect(url).sql("SELECT sig FROM kernels ORDER BY ALL").fetchall() == want
        rc, out, err = cli_in_process("migrate", url)
        assert rc == 0 and "already in the current layout" in out + err
        # a migration stopped after it uploaded the files, before their run.json and the index: the next one records
        # the sizes of the files as they are
        root = url.removeprefix("memory://")
        mem.pipe_file(f"{folder}/run.json", (old / "runs" / f"run_id={rid}" / "run.json").read_bytes())
        mem.pipe_file(f"{root}/manifest.json", (old / "manifest.json").read_bytes())
        assert cli_in_process("migrate", url)[0] == 0
        assert json.loads(mem.cat_file(f"{folder}/run.json"))["files"] == info["files"]
        v1 = f"memory://traceql-test-{tmp_path.name}/v1"  # layout 1 renames folders: refused, with what to do
        mem.put(str(Path(__file__).parent / "data" / "store_v1"), v1.removeprefix("memory://"), recursive=True)
        rc, out, err = cli_in_process("migrate", v1)
        assert rc == 2 and "object stores" in err and "new URL" in err and "Traceback" not in err, err
    finally:
        with contextlib.suppress(FileNotFoundError):
            mem.rm(f"/traceql-test-{tmp_path.name}", recursive=True)
