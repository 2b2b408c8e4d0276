"""`traceql sql` reads the run store and nothing else unless --allow-files, and stops promptly on Ctrl-C."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_cli

from traceql import store
from traceql.errors import BadInputError
from traceql.sqlcmd import query


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def _kernels_file(run: Path) -> Path:
    (run_id,) = json.loads((run / "manifest.json").read_text())["runs"]
    return store.run_dir(run, run_id) / "kernels.parquet"


@pytest.mark.parametrize("make_sql", [
    lambda run, tmp: f"COPY (SELECT 1 AS a) TO '{_kernels_file(run)}' (FORMAT parquet, USE_TMP_FILE false)",
    lambda run, tmp: f"COPY (SELECT 1 AS a) TO '{tmp / 'out.csv'}'",
    lambda run, tmp: f"SELECT * FROM read_text('{tmp / 'secret.txt'}')",
    lambda run, tmp: f"SELECT * FROM read_csv('{tmp / 'secret.txt'}')",
    lambda run, tmp: f"SELECT count(*) FROM read_parquet('{_kernels_file(run)}')",
    lambda run, tmp: f"SELECT * FROM glob('{tmp}/*')",
    lambda run, tmp: f"ATTACH '{tmp / 'db.duckdb'}' AS other",
    lambda run, tmp: "INSTALL httpfs",
], ids=["copy_over_store", "copy_out", "read_text", "read_csv", "read_parquet", "glob", "attach", "install"])
def test_sql_touches_no_file(make_sql, tmp_path, overlap_run):
    (tmp_path / "secret.txt").write_text("a,b\n1,2\n")
    before, listed = _digests(overlap_run), sorted(p.name for p in tmp_path.iterdir())
    sql = make_sql(overlap_run, tmp_path)
    with pytest.raises(BadInputError, match="--allow-files") as err:
        query([overlap_run], sql)
    assert "Cannot access" in str(err.value)
    assert _digests(overlap_run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listed
    # the store is still whole: every table reads
    assert query([overlap_run], "SELECT count(*) AS n FROM kernels").to_pylist()[0]["n"] > 0


def test_sql_cannot_turn_file_access_back_on(overlap_run):
    with pytest.raises(BadInputError, match="locked"):
        query([overlap_run], "SET enable_external_access = true")
    with pytest.raises(BadInputError, match="locked"):
        query([overlap_run], "SET allowed_directories = ['/']")


def test_sql_reads_every_table_and_view_while_locked(overlap_run, monkeypatch):
    """The lock must not cost users their data: base tables (a streamed one included) and analysis views read, those
    over the tables the analysis keeps in files among them (instance facts, activity rows; in files here whatever their
    size)."""
    from traceql import duck

    monkeypatch.setattr(duck, "FILE_MIN_ROWS", 1)
    rows = query([overlap_run], """
        SELECT (SELECT count(*) FROM kernels) AS k, (SELECT count(DISTINCT metric) FROM gpu_metrics) AS m,
               (SELECT count(*) FROM kernel_attribution) AS a, (SELECT count(*) FROM instance_facts) AS f,
               (SELECT count(*) FROM _activity_rows) AS r""").to_pylist()[0]
    assert rows["k"] > 0 and rows["m"] > 0 and rows["a"] > 0
    assert rows["f"] == rows["r"] >= rows["k"]


def test_sql_allow_files_opts_in(tmp_path, overlap_run):
    dest = tmp_path / "kernels.csv"
    rc, _, stderr = run_cli("sql", overlap_run, f"COPY (SELECT device_id FROM kernels) TO '{dest}'")
    assert rc == 2 and "--allow-files" in stderr and "Traceback" not in stderr and not dest.exists()
    rc, _, stderr = run_cli("sql", overlap_run, "--allow-files", f"COPY (SELECT device_id FROM kernels) TO '{dest}'")
    assert rc == 0, stderr
    assert len(dest.read_text().splitlines()) > 1


SLOW = ("SELECT count(*) FROM kernels a, kernels b, kernels c, kernels d "
        "WHERE a.start_ns + b.start_ns > c.start_ns + d.start_ns")


@pytest.mark.parametrize("where", ["query", "prepare"])
def test_sql_stops_on_ctrl_c(where, overlap_run):
    # a join of 10^11 rows runs for minutes; "prepare" asks for an analysis view, so Ctrl-C lands in the
    # attribution's own statements
    sql = SLOW if where == "query" else SLOW.replace("kernels d", "kernels d, kernel_attribution e")
    proc = subprocess.Popen([sys.executable, "-m", "traceql.cli", "sql", str(overlap_run), sql], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(6 if where == "query" else 4)  # past start-up, into DuckDB
        assert proc.poll() is None, proc.communicate()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert waited < 5, waited
    assert "interrupted" in err and "Traceback" not in err, err
    assert out == ""
