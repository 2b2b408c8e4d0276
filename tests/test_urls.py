"""Run stores and attribution outputs at URLs (fsspec), tested on ``memory://``, which needs no credentials.

``memory://`` is the memory of this process, so every command runs here (the local executor, the CLI in-process).
Real traces, real DuckDB: a store ingested to a URL must equal one ingested to a folder (run ids, rows, and the
attribution byte for byte); a run folder whose upload was interrupted (no ``run.json``) is left out and named;
re-ingesting writes nothing; bad URLs exit 2 with a message naming them, and local paths work without fsspec.
"""

from __future__ import annotations

import contextlib
import json
import lzma
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import H200
from conftest import cli_in_process as cli

import traceql
from traceql import store
from traceql.errors import BadInputError, MissingInputError, UsageError
from traceql.store import schema

fsspec = pytest.importorskip("fsspec")
MEM = fsspec.filesystem("memory")
TRACES = (H200 / "contention.sqlite.xz", H200 / "train_ddp.sqlite.xz")




@pytest.fixture
def bucket(tmp_path):
    """A fresh memory:// bucket of this test, removed afterwards."""
    name = f"traceql-test-{tmp_path.name}"
    yield name
    with contextlib.suppress(FileNotFoundError):
        MEM.rm(f"/{name}", recursive=True)


@pytest.fixture(scope="module")
def local_store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "store"
    traceql.ingest(list(TRACES), out)
    return out


def rows(run_dir: str | Path) -> dict[str, list]:
    """Every table's rows, in a total order (the ingest time, a clock reading, left out)."""
    con = traceql.connect(run_dir, views=False)
    return {t: con.sql(f'SELECT * EXCLUDE ({"ingested_at" if t == "runs" else "run_id"}), '
                       f'{"run_id" if t != "runs" else "NULL"} FROM "{t}" ORDER BY ALL').fetchall()
            for t in schema.TABLES}


def puts(monkeypatch) -> list[str]:
    """The paths the memory file system is written, in order (the real writes, recorded)."""
    seen: list[str] = []
    cls = type(MEM)
    for method in ("put_file", "pipe_file"):
        real = getattr(cls, method)

        def spy(self, path, *args, _real=real, _method=method, **kwargs):
            seen.append(args[0] if _method == "put_file" else path)
            return _real(self, path, *args, **kwargs)
        monkeypatch.setattr(cls, method, spy)
    return seen


def test_ingest_to_url_equals_local(bucket, local_store, tmp_path, monkeypatch):
    url = f"memory://{bucket}/store"
    written = puts(monkeypatch)
    rc, out, err = cli("ingest", *TRACES, "-o", url)
    assert rc == 0, err
    local = store.read_manifest(local_store)["runs"]
    remote = json.loads(MEM.cat_file(f"/{bucket}/store/manifest.json"))
    assert sorted(remote["runs"]) == sorted(local) and len(local) == 2
    # the runs table records when each run was ingested: its file's sha256 (and maybe size) differs
    assert {r: {k: v for k, v in e.items() if k not in ("files", "digests")} for r, e in remote["runs"].items()} == \
        {r: {k: v for k, v in e.items() if k not in ("files", "digests")} for r, e in local.items()}
    # each run's files, then its run.json (its upload is complete), then the index, once
    for rid in local:
        folder = f"/{bucket}/store/runs/run_id={rid}/"
        mine = [p for p in written if p.startswith(folder)]
        assert mine[-1] == folder + "run.json" and len(mine) == len(local[rid]["tables"]) + 1
        assert sorted(MEM.ls(folder, detail=False)) == sorted(mine)
    assert written[-1] == f"/{bucket}/store/manifest.json" and written.count(written[-1]) == 1
    # read back: the same rows as the local store, through connect, and the same attribution, byte for byte
    assert rows(url) == rows(local_store)
    # one run per unit (DuckDB on one thread): the same bytes every time; one connection sums floats on several
    # threads in an order that changes from one run to the next (docs/scale.md)
    assert cli("attribute", url, "-o", f"memory://{bucket}/attribution", "--executor", "local")[0] == 0
    assert cli("attribute", local_store, "-o", tmp_path / "attribution", "--executor", "local")[0] == 0
    for name in ("attribution.json", "kernels.parquet", "summary.parquet"):
        assert MEM.cat_file(f"/{bucket}/attribution/{name}") == (tmp_path / "attribution" / name).read_bytes(), name
    assert written[-1] == f"/{bucket}/attribution/attribution.json"  # the contract last
    attribution = json.loads(MEM.cat_file(f"/{bucket}/attribution/attribution.json"))
    assert {r["run_id"] for r in attribution["runs"]} == set(local) and attribution["kernels"]
    # the copy that was read is gone
    assert not list(Path(tempfile.gettempdir()).glob("traceql-url-*"))


def test_reingest_writes_nothing(bucket, tmp_path, monkeypatch):
    url = f"memory://{bucket}/store"
    first = traceql.ingest(TRACES[0], url)
    before = {p: id(f) for p, f in MEM.store.items() if p.startswith(f"/{bucket}/")}
    written = puts(monkeypatch)
    again = traceql.ingest(TRACES[0], url)
    assert [i.run_id for i in again] == [i.run_id for i in first] and again[0].already and not first[0].already
    assert written == [] and {p: id(f) for p, f in MEM.store.items() if p.startswith(f"/{bucket}/")} == before
    rc, out, err = cli("ingest", TRACES[0], "-o", url)
    assert rc == 0 and f"already ingested {TRACES[0]} as run {first[0].run_id}" in out + err
    # a decompressed copy is another file, so another run: added beside the first
    copy = tmp_path / "copy.sqlite"
    with lzma.open(TRACES[0]) as src, open(copy, "wb") as dst:
        shutil.copyfileobj(src, dst)
    traceql.ingest(copy, url)
    assert len(json.loads(MEM.cat_file(f"/{bucket}/store/manifest.json"))["runs"]) == 2


def test_interrupted_upload_is_left_out_and_named(bucket, local_store, capsys):
    url = f"memory://{bucket}/store"
    (first,) = traceql.ingest(TRACES[0], url)
    # an upload that stopped before its run.json: the files of the other trace's run, and no run.json
    (other,) = [r for r in store.read_manifest(local_store)["runs"] if r != first.run_id]
    for f in store.run_dir(local_store, other).glob("*.parquet"):
        MEM.pipe(f"/{bucket}/store/runs/run_id={other}/{f.name}", f.read_bytes())
    con = traceql.connect(url, views=False)
    assert con.sql("SELECT DISTINCT run_id FROM kernels").fetchall() == [(first.run_id,)]
    err = capsys.readouterr().err
    assert f"run_id={other} in {url}/runs is still being written (no run.json yet); it is left out" in err
    rc, out, err = cli("sql", url, "SELECT count(DISTINCT run_id) AS runs FROM kernels", "-f", "csv")
    assert rc == 0 and out.splitlines()[-1] == "1"
    # ingesting that trace again replaces the interrupted upload's files; the run is complete and indexed
    (second,) = traceql.ingest(TRACES[1], url)
    assert second.run_id == other and not second.already
    assert sorted(json.loads(MEM.cat_file(f"/{bucket}/store/manifest.json"))["runs"]) == sorted([first.run_id, other])
    assert rows(url) == rows(local_store)
    # a complete run the index does not list yet (its client's index update was lost) is read
    MEM.pipe(f"/{bucket}/store/manifest.json", json.dumps(store.new_manifest()).encode())
    assert rows(url) == rows(local_store)


def test_report_and_a_failed_trace(bucket, tmp_path):
    url = f"memory://{bucket}/store"
    (tmp_path / "empty.sqlite").write_bytes(b"")
    rc, _, err = cli("ingest", TRACES[0], tmp_path / "empty.sqlite", "-o", url, "--on-error", "skip")
    assert rc == 2 and "1 of 2 trace(s) failed" in err
    # nothing of the failed trace was uploaded: one complete run, and the index of it
    assert len(MEM.ls(f"/{bucket}/store/runs", detail=False)) == 1
    assert len(json.loads(MEM.cat_file(f"/{bucket}/store/manifest.json"))["runs"]) == 1
    rc, out, err = cli("report", url, "-o", tmp_path / "report.html", "--recipe", "kernels")
    assert rc == 0, err
    assert "contention.sqlite.xz" in (tmp_path / "report.html").read_text()
    # an attribution that fails writes nothing at its URL
    rc, _, err = cli("attribute", tmp_path / "empty.sqlite", "-o", f"memory://{bucket}/attribution")
    assert rc == 2 and not MEM.exists(f"/{bucket}/attribution")


def test_bad_urls(bucket, tmp_path):
    url = f"memory://{bucket}/store"
    for args, words in [
        (("ingest", TRACES[0], "-o", "nosuchfs://b/store"), "nosuchfs://b/store: no file system for this URL"),
        (("sql", "nosuchfs://b/store", "SELECT 1"), "nosuchfs://b/store: no file system for this URL"),
        (("attribute", TRACES[0], "-o", "nosuchfs://b/out"), "nosuchfs://b/out: no file system for this URL"),
        (("sql", url, "SELECT 1"), f"{url}: no such run directory"),
        (("attribute", url), f"{url}: no such run directory"),
        (("report", url, "-o", tmp_path / "r.html"), f"{url}: no such run directory"),
        (("attribute", url, "--executor", "dask://localhost:1"), "read through a copy on this host"),
    ]:
        rc, out, err = cli(*args)
        assert rc == 2 and words in err and "Traceback" not in err, (args, err)
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(MissingInputError, match=f"{url}: no such run directory"):
        traceql.connect(url)
    # a trace is not a run directory: ingest it first
    MEM.pipe(f"/{bucket}/trace.sqlite.xz", TRACES[0].read_bytes())
    with pytest.raises(BadInputError, match=r"a file, not a run directory; .*traceql ingest memory://"):
        traceql.connect(f"memory://{bucket}/trace.sqlite.xz")
    # a folder that is not a store, and a damaged index: named by their URL, never by the local copy
    MEM.pipe(f"/{bucket}/other/notes.txt", b"x")
    with pytest.raises(BadInputError, match=f"memory://{bucket}/other: not a traceql run directory"):
        traceql.connect(f"memory://{bucket}/other")
    MEM.pipe(f"/{bucket}/store/manifest.json", b"{not json")
    for run in (lambda: traceql.connect(url), lambda: traceql.ingest(TRACES[0], url)):
        with pytest.raises(BadInputError, match=f"{url}/manifest.json: unreadable manifest"):
            run()
    rc, _, err = cli("ingest", TRACES[0], "-o", url)
    assert rc == 2 and f"{url}/manifest.json: unreadable manifest" in err and "/tmp" not in err
    assert MEM.cat_file(f"/{bucket}/store/manifest.json") == b"{not json"  # nothing written


def test_without_fsspec(tmp_path, monkeypatch):
    """Local paths need no fsspec; a URL then says what to install."""
    for name in [m for m in sys.modules if m == "fsspec" or m.startswith("fsspec.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec raises ImportError
    rc, _, err = cli("ingest", TRACES[0], "-o", tmp_path / "store")
    assert rc == 0, err
    assert cli("attribute", tmp_path / "store", "-o", tmp_path / "out")[0] == 0
    assert (tmp_path / "out" / "attribution.json").is_file()
    rc, _, err = cli("sql", f"file://{tmp_path / 'store'}", "SELECT count(*) FROM runs", "-f", "csv")
    assert rc == 0, err
    for args in (("ingest", TRACES[0], "-o", "memory://b/store"), ("sql", "memory://b/store", "SELECT 1"),
                 ("attribute", tmp_path / "store", "-o", "memory://b/out")):
        rc, _, err = cli(*args)
        assert rc == 2 and "URLs need fsspec: pip install" in err and "Traceback" not in err, err
    with pytest.raises(UsageError, match="URLs need fsspec"):
        traceql.connect("memory://b/store")


def test_baseline_and_ncu_run_directories_at_urls(bucket, tmp_path):
    """--baseline and --ncu may name run directories at URLs: the same attribution as their local paths."""
    base_local, ncu_local = tmp_path / "base", tmp_path / "ncu"
    traceql.ingest(TRACES[0], base_local)
    traceql.ingest(H200 / "kernels.ncu-rep.xz", ncu_local)
    for name, path in (("base", base_local), ("ncu", ncu_local)):
        for f in path.rglob("*"):
            if f.is_file():
                MEM.pipe(f"/{bucket}/{name}/{f.relative_to(path).as_posix()}", f.read_bytes())
    run = tmp_path / "run"
    traceql.ingest(H200 / "overlap.sqlite.xz", run)
    args = ["--executor", "local", "--format", "json"]
    rc, by_url, err = cli("attribute", run, "--baseline", f"memory://{bucket}/base", "--ncu", f"memory://{bucket}/ncu",
                          *args)
    assert rc == 0, err
    rc, by_path, err = cli("attribute", run, "--baseline", base_local, "--ncu", ncu_local, *args)
    assert rc == 0, err
    assert by_url == by_path and json.loads(by_path)["kernels"]
    assert not list(Path(tempfile.gettempdir()).glob("traceql-url-*"))
