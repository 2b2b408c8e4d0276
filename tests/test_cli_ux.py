"""What a user sees: choices listed in --help, progress on a terminal only, the Python twin of `traceql attribute`."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import H200, REPO, run_cli
from synthetic import launches, make_store

import traceql

WIDE = dict(os.environ, COLUMNS="200", TERM="xterm")


@pytest.mark.parametrize(("command", "choices"), [
    (["sql"], "table|csv|json|parquet"),
    (["attribute"], "table|json|csv"),
    (["attribute"], "any|comm"),
    (["ingest"], "raise|skip"),
    (["report"], "raise|skip"),
    (["collect"], "none|base|reset"),
    (["bench"], "overlap|contention|train"),
])
def test_choices_are_listed_in_help(command, choices):
    rc, out, err = run_cli(*command, "--help", env=WIDE)
    assert rc == 0, err
    assert choices in out, out


@pytest.mark.parametrize(("args", "named"), [
    (["sql", "run", "SELECT 1", "--format", "xml"], "'table', 'csv', 'json', 'parquet'"),
    (["attribute", "run", "--focus", "compute"], "'any', 'comm'"),
    (["ingest", "x.sqlite", "-o", "out", "--on-error", "ignore"], "'raise', 'skip'"),
    (["bench", "nbody"], "'overlap', 'contention', 'train'"),
])
def test_a_bad_choice_is_a_usage_error_naming_the_choices(args, named, tmp_path):
    rc, _, err = run_cli(*args, cwd=tmp_path)
    assert rc == 2 and named in err and "Traceback" not in err, err


def test_choices_are_case_insensitive(tmp_path, overlap_run):
    rc, out, err = run_cli("sql", overlap_run, "SELECT 1 AS one", "--format", "JSON")
    assert rc == 0 and json.loads(out) == [{"one": 1}], err


def _on_a_terminal(args: list[str], timeout: float = 120) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe): (exit code, stdout, what the terminal got)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "traceql.cli", *args], cwd=REPO, env=WIDE, stdout=subprocess.PIPE,
                            stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError(f"no output for {timeout} s: {seen[-500:]!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        seen += chunk
    out = proc.stdout.read().decode()
    proc.wait(timeout)
    os.close(leader)
    return proc.returncode, out, seen.decode(errors="replace")


def test_ingest_shows_progress_on_a_terminal_only(tmp_path):
    trace = H200 / "contention.sqlite.xz"
    rc, out, term = _on_a_terminal(["ingest", str(trace), "-o", str(tmp_path / "a")])
    assert rc == 0, term
    assert "ingest" in term and "0/1" in term  # the bar, drawn while it ran
    assert f"ingested {trace}" in term and out.strip() == str(tmp_path / "a")
    rc, out, err = run_cli("ingest", trace, "-o", tmp_path / "b")  # stderr a pipe: the lines, no bar
    assert rc == 0, err
    assert "0/1" not in err and "\x1b[" not in err
    assert err.splitlines()[0].startswith(f"ingested {trace} as run ")


def test_report_shows_progress_on_a_terminal(tmp_path):
    store = _synthetic(tmp_path)
    rc, out, term = _on_a_terminal(["report", str(store), "-o", str(tmp_path / "r.html")])
    assert rc == 0, term
    assert "report" in term and "1/1" in term and "\x1b[" in term
    assert "report of 1 traced run, 0 skipped" in term


def _synthetic(tmp_path: Path) -> Path:
    """One GPU: a kernel alone four times, then twice beside an NCCL kernel, 50% slower."""
    root = tmp_path / "store"
    alone = [dict(start_ns=i * 10_000, end_ns=i * 10_000 + 1000, name="gemm", ctas=8, correlation_id=i + 1)
             for i in range(4)]
    beside = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, name="gemm", ctas=8,
                   correlation_id=10 + i) for i in range(2)]
    comm = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, kind="comm", ctas=4,
                 correlation_id=20 + i, stream_id=9) for i in range(2)]
    kernels = alone + beside + comm
    make_store(root, kernels=kernels, runtime_api=launches(kernels))
    return root


def test_python_twin_of_attribute_returns_the_json_output(tmp_path):
    store = _synthetic(tmp_path)
    result = traceql.attribute(store)  # the package attribute is callable, as traceql.ingest is
    assert isinstance(result, traceql.Attribution)
    rc, out, err = run_cli("attribute", store, "--format", "json")
    assert rc == 0, err
    assert json.loads(out) == json.loads(json.dumps(result.to_json(), default=str))
    gemm = next(r for r in result.kernels.to_pylist() if r["name"] == "gemm")
    assert gemm["slowdown"] == pytest.approx(0.5)
    # the module stays a module for those who import from it
    import traceql.attribute as module
    from traceql.attribute import attribute

    assert module.attribute is attribute and module(store).to_json() == result.to_json()


def test_the_package_imports_no_optional_dependency():
    """A lean install: importing traceql and running its CLI's modules pulls neither polars nor vl-convert."""
    code = ("import sys, traceql, traceql.cli, traceql.report, traceql.report.html, traceql.sqlcmd, traceql.collect; "
            "traceql.report.vega.bundle(); "
            "print(sorted(m for m in ('polars', 'vl_convert', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_the_report_bundle_draws_the_vega_lite_that_altair_writes():
    """The report inlines a bundled Vega-Lite (no vl-convert at run time); it must be the version altair's specs name
    (else: python -m traceql.report.vega), and the bytes must be the ones recorded."""
    import gzip
    import hashlib

    import altair as alt

    from traceql.report import vega

    info = vega.meta()
    assert info["vega_lite"] == "v" + "_".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    js = gzip.decompress((Path(vega.__file__).parent / vega.BUNDLE).read_bytes())
    assert hashlib.sha256(js).hexdigest() == info["sha256"]
    assert "window.vegaEmbed=" in js.decode() and "</script" not in vega.bundle()


def test_shell_completion_script():
    """`traceql --show-completion` prints the completion script of the user's shell (`--install-completion` installs
    it): the shell's completion machinery, calling back into traceql for its commands and options."""
    rc, out, err = run_cli("--show-completion")
    assert rc == 0, err
    assert any(word in out for word in ("COMPREPLY", "compdef", "complete --command")), out[:300]
