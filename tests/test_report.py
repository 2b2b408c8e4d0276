"""traceql report: recipes, charts (through their specs), the self-contained page, and the page in a real Chromium.

The real data is the run store collected on 2 x H200 by `traceql bench`/`traceql collect` (tests/data/h200/suite);
a synthetic run carries the hostile names (``<script>`` in a kernel and an NVTX range) with a known slowdown.
Browser tests need Debian's chromium and the playwright package; with TRACEQL_REQUIRE_BROWSER=1 (CI) they fail
instead of skipping when either is missing.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import H200, NSYS2022, run_cli
from synthetic import launches, make_store

import traceql
from traceql import store
from traceql.errors import BadInputError, MissingInputError
from traceql.report import recipe as recipes
from traceql.report import report
from traceql.report.charts import CHARTS, FACTORS

SUITE = H200 / "suite"
EVIL_KERNEL = 'void evil<int&, "</script><script>alert(1)</script>">(float*)'
EVIL_NVTX = "case:<script>alert(2)</script>&amp;"


def _datasets(spec) -> list[list[dict]]:
    """Every inline dataset of a Vega-Lite spec (top level, layers, datasets)."""
    found = []
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "values" and isinstance(v, list):
                found.append(v)
            else:
                found += _datasets(v)
    elif isinstance(spec, list):
        for v in spec:
            found += _datasets(v)
    return found


def _suite_runs() -> dict[str, str]:
    manifest = json.loads((SUITE / "manifest.json").read_text())
    con = traceql.connect(SUITE, views=False)
    names = dict(con.sql("SELECT json_extract_string(labels_json, '$.name'), run_id FROM runs").fetchall())
    assert set(names.values()) == set(manifest["runs"])
    return names


@pytest.fixture(scope="module")
def overlap_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "overlap.html"
    return report(SUITE, out), out


@pytest.fixture(scope="module")
def evil_store(tmp_path_factory) -> Path:
    """One GPU: 4 isolated instances of a kernel of 1000 ns, 2 more of 1500 ns beside an NCCL kernel."""
    root = tmp_path_factory.mktemp("evil") / "store"
    kernels = [dict(start_ns=i * 10_000, end_ns=i * 10_000 + 1000, name=EVIL_KERNEL, ctas=8, correlation_id=i + 1)
               for i in range(4)]
    kernels += [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, name=EVIL_KERNEL, ctas=8,
                     correlation_id=10 + i) for i in range(2)]
    comm = [dict(start_ns=50_000 + i * 10_000, end_ns=50_000 + i * 10_000 + 1500, kind="comm", ctas=4,
                 correlation_id=20 + i, stream_id=9) for i in range(2)]
    make_store(root, kernels=kernels + comm, runtime_api=launches(kernels + comm),
               nvtx=[dict(text=EVIL_NVTX, start_ns=40_000, end_ns=80_000)])
    return root


# --- recipes -------------------------------------------------------------------------------------------------


def test_builtin_recipes_load_and_name_known_views_and_charts():
    assert {"overlap", "kernels", "microbench", "power"} <= set(recipes.builtin_names())
    for name in recipes.builtin_names():
        rec = recipes.load(name)
        assert rec.sections, name
        for s in rec.sections:
            if s.chart:
                from traceql.report.reducers import REDUCERS

                given = set(REDUCERS[s.reduce].gives) if s.reduce else set()
                assert set(CHARTS[s.chart].needs) <= {q.name for q in s.queries} | given


@pytest.mark.parametrize("text, message", [
    ("title = 'x'", "no [[section]]"),
    ("[[section]]\ntitle='a'\nchart='timeline'\n[section.queries]\nsegments='timeline_segments'",
     "needs the queries nvtx"),
    ("[[section]]\ntitle='a'\ntable='t'\n[section.queries]\nt='no_such_view'", "no view 'no_such_view'"),
    ("[[section]]\ntitle='a'\nchart='pie'\n[section.queries]\nt='kernels'", "no chart 'pie'"),
    ("[[section]]\ntitle='a'\nscope='some'\ntable='t'\n[section.queries]\nt='kernels'", "scope 'some'"),
    ("[[section]]\ntitle='a'\n[section.queries]\nt='kernels'", "shows nothing"),
    ("[[section]\n", "not valid TOML"),
    ("[[section]]\ntitle='a'\ntable='t'\ncolour='red'\n[section.queries]\nt='kernels'", "unknown key(s) colour"),
])
def test_bad_recipes_are_refused_with_the_reason(text, message):
    with pytest.raises(BadInputError, match=re.escape(message)):
        recipes.parse(text, name="x", source="my.toml")


def test_missing_recipe_file():
    with pytest.raises(MissingInputError, match="no such file"):
        recipes.load("/nonexistent/recipe.toml")
    with pytest.raises(BadInputError, match="not a built-in recipe"):
        recipes.load("no-such-recipe")


def test_user_recipe_with_own_sql_maps_over_runs_then_reduces(tmp_path):
    own = tmp_path / "mine.toml"
    own.write_text("""
title = "kernel counts"
[[section]]
title = "per run"
scope = "all"
table = "k"
limit = 100
[section.queries]
k = { sql = "SELECT run_id, kind, count(*) AS n FROM kernels GROUP BY ALL", order_by = "kind" }
""")
    rep = report(SUITE, tmp_path / "r.html", recipe=own)
    table = rep.sections[0].tables["k"]
    got = {(r["run"], r["kind"]): r["n"] for r in table.to_pylist()}
    con = traceql.connect(SUITE, views=False)
    want = {(name, kind): n for name, kind, n in con.sql(
        "SELECT json_extract_string(r.labels_json, '$.name'), k.kind, count(*) FROM kernels k JOIN runs r "
        "USING (run_id) GROUP BY ALL").fetchall()}
    assert got == want and len({r for r, _ in got}) == 6  # every traced run (the ncu run has no kernels)


# --- the overlap report over real runs -----------------------------------------------------------------------


def test_overlap_report_covers_every_traced_run(overlap_report):
    rep, out = overlap_report
    names = _suite_runs()
    assert not rep.skipped
    # the header counts traces and Nsight Compute profiles apart, and names the recipe once
    formats = [json.loads((store.run_dir(SUITE, rid) / "run.json").read_text())["format"] for rid in names.values()]
    profiles = formats.count("ncu-rep")
    assert profiles == 1
    meta = re.search(r'<p class="meta">(.*?)</p>', out.read_text(), re.S).group(1)
    assert f"{len(formats) - profiles} traced runs and 1 Nsight Compute profile" in meta
    assert "built-in recipe overlap" in meta and "recipe built-in" not in meta
    assert set(rep.runs.column("run").to_pylist()) == set(names)
    timeline = next(s for s in rep.sections if s.section.chart == "timeline")
    assert {label for label, _ in timeline.per_run} == set(names) - {"kernels"}
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "vegaEmbed" in page
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", page), "no remote resource"


def test_timeline_segments_add_up_to_the_device_summary(overlap_report):
    """Segments compute/comm/overlap are the interval unions that device_summary reports."""
    rep, _ = overlap_report
    summary = next(s for s in rep.sections if s.section.chart == "device_time").tables["summary"]
    timeline = next(s for s in rep.sections if s.section.chart == "timeline")
    for _label, tables in timeline.per_run:
        seg = tables["segments"].to_pylist()
        for dev in {r["device_id"] for r in seg}:
            total = {st: sum(r["dur_ns"] for r in seg if r["device_id"] == dev and r["state"] == st)
                     for st in ("compute", "comm", "overlap")}
            row = next(r for r in summary.to_pylist() if r["run_id"] == seg[0]["run_id"] and r["device_id"] == dev)
            assert total["overlap"] == row["overlap_ns"]
            assert total["comm"] == row["exposed_comm_ns"]
            assert total["compute"] + total["overlap"] == row["compute_ns"]


def test_slowdown_chart_stacks_parts_that_add_up_to_each_slowdown(overlap_report):
    rep, _ = overlap_report
    sec = next(s for s in rep.sections if s.section.chart == "slowdown_parts")
    kernels = sec.tables["kernels"]
    assert kernels.num_rows > 0
    spec = CHARTS["slowdown_parts"].fn(sec.tables, sec.section.options).to_dict()
    (values,) = _datasets(spec)
    by_kernel: dict[str, float] = {}
    for v in values:
        by_kernel[v["kernel"]] = by_kernel.get(v["kernel"], 0) + v["value"]
        assert v["part"] in FACTORS
    assert len(by_kernel) == min(kernels.num_rows, sec.section.options["top"])  # one bar per signature, no merging
    for v in values:
        assert by_kernel[v["kernel"]] == pytest.approx(v["slowdown"], abs=1e-6)
    assert spec["encoding"]["x"]["aggregate"] == "sum" and spec["encoding"]["color"]["field"] == "part"


def test_slowdown_chart_ranks_by_time_lost_and_no_label_reads_none():
    """A sub-µs memset 2.5x as long (no grid, no NVTX range) loses 30 µs; a GEMM 8% slower loses 1.8 ms, a
    kernel 90% slower 0.1 ns: the GEMM leads, the negligible one is left out, and no label says "None"."""
    import pyarrow as pa

    base = dict(run="r", run_id="r1", device_id=0, nvtx=None, activity="kernel", significant=True, residual=0.0,
                sm=0.0, dram_bw=0.0, cache=0.0, clock=0.0, link=0.0)
    rows = [dict(base, name="[CUDA memset]", short_name="[CUDA memset]", activity="memset", grid=None,
                 slowdown=1.5, sum_t0_ns=20_000.0, residual=1.5, **{"class": "unexplained"}),
            dict(base, name="tiny", short_name="tiny", grid="1x1x1", slowdown=0.9, sum_t0_ns=0.1, residual=0.9,
                 **{"class": "unexplained"}),
            dict(base, name="nvjet_gemm", short_name="nvjet_gemm", grid="2x66x1", nvtx="step", slowdown=0.08,
                 sum_t0_ns=22_500_000.0, sm=0.08, **{"class": "sm"})]
    spec = CHARTS["slowdown_parts"].fn({"kernels": pa.Table.from_pylist(rows)}, {"top": 20}).to_dict()
    (values,) = _datasets(spec)
    order = list(dict.fromkeys(v["kernel"] for v in values))
    assert order == ["r · GPU 0 · nvjet_gemm · 2x66x1 · step", "r · GPU 0 · [CUDA memset]"]
    assert spec["encoding"]["y"]["sort"] == order
    assert not any("None" in str(v) for r in values for v in r.values())


def test_report_slowdown_section_lists_the_most_time_lost_first(overlap_report):
    rep, _ = overlap_report
    for chart in ("slowdown_parts", "metrics_iso_vs_ovl"):
        rows = next(s for s in rep.sections if s.section.chart == chart).tables["kernels"].to_pylist()
        lost = [r["lost_ns"] for r in rows]
        assert lost and lost == sorted(lost, reverse=True) and lost[0] > 0, chart
        assert rows[0]["activity"] == "kernel", chart
    sec = next(s for s in rep.sections if s.section.chart == "slowdown_parts")
    spec = CHARTS["slowdown_parts"].fn(sec.tables, sec.section.options).to_dict()
    (values,) = _datasets(spec)
    assert not any("None" in v["kernel"] for v in values)
    assert "memset" not in values[0]["kernel"]


def test_gemm_beside_spin_is_in_the_worst_kernels_with_class_sm(overlap_report):
    rep, _ = overlap_report
    worst = next(s for s in rep.sections if s.section.title == "Worst kernels").tables["kernels"].to_pylist()
    gemm = [r for r in worst if r["run"] == "contention" and r["short_name"].startswith("nvjet")]
    assert gemm and gemm[0]["class"] == "sm" and gemm[0]["slowdown"] > 0.1
    lost = [r["lost_ns"] for r in worst if r["lost_ns"] is not None]
    assert lost == sorted(lost, reverse=True)  # reduced across runs, ranked by the time lost


def test_power_chart_has_every_sample_of_the_run(overlap_report):
    rep, _ = overlap_report
    sec = next(s for s in rep.sections if s.section.chart == "power")
    names = _suite_runs()
    for label, tables in sec.per_run:
        expected = pq.read_table(store.run_dir(SUITE, names[label]) / "power.parquet").num_rows
        assert tables["power"].num_rows == expected
        if expected:
            spec = CHARTS["power"].fn(tables, {}).to_dict()
            assert spec["layer"][0]["mark"]["type"] == "line"
            assert [len(d) for d in _datasets(spec)] == [expected]


def test_microbench_effects_match_an_independent_computation(tmp_path):
    """Compute slowdown overlapped vs compute only, from NVTX ranges and kernels read with pyarrow alone."""
    rep = report(SUITE, tmp_path / "m.html", recipe="microbench")
    effects = next(s for s in rep.sections if s.section.table == "effects").tables["effects"].to_pylist()
    overlap_id = _suite_runs()["overlap"]
    nvtx = pq.read_table(store.run_dir(SUITE, overlap_id) / "nvtx.parquet").to_pylist()
    kernels = pq.read_table(store.run_dir(SUITE, overlap_id) / "kernels.parquet").to_pylist()
    api = pq.read_table(store.run_dir(SUITE, overlap_id) / "runtime_api.parquet").to_pylist()
    kernel_of = {(k["global_pid"], k["correlation_id"]): k for k in kernels}
    launches_by_tid: dict[int, list[dict]] = {}
    for a in api:
        if (a["global_pid"], a["correlation_id"]) in kernel_of:
            launches_by_tid.setdefault(a["global_tid"], []).append(a)

    def compute_ns(case: dict) -> int:
        return sum(kernel_of[(a["global_pid"], a["correlation_id"])]["dur_ns"]
                   for a in launches_by_tid.get(case["global_tid"], [])
                   if case["start_ns"] <= a["start_ns"] <= case["end_ns"]
                   and kernel_of[(a["global_pid"], a["correlation_id"])]["kind"] == "compute")

    checked = 0
    for row in (r for r in effects if r["run_id"] == overlap_id):
        cases = [n for n in nvtx if n["case_name"] == "overlap" and dict(n["labels"]).get("op") == row["op"]
                 and dict(n["labels"]).get("dtype") == row["dtype"]]
        ovl = sum(compute_ns(c) for c in cases if dict(c["labels"])["mode"] == "overlapped")
        alone = sum(compute_ns(c) for c in cases if dict(c["labels"])["mode"] == "compute")
        assert row["compute_slowdown"] == pytest.approx(ovl / alone - 1, rel=1e-9)
        checked += 1
    assert checked == 12  # 3 collectives x 4 data types


def test_kernels_and_power_recipes(tmp_path):
    rep = report(SUITE, tmp_path / "k.html", recipe="kernels")
    kinds = next(s for s in rep.sections if s.section.table == "kinds").tables["kinds"]
    con = traceql.connect(SUITE, views=False)
    total = con.sql("SELECT sum(dur_ns) FROM kernels").fetchall()[0][0]
    assert sum(kinds.column("total_ns").to_pylist()) == total
    rep = report(SUITE, tmp_path / "p.html", recipe="power")
    summary = rep.sections[0].tables["summary"].to_pylist()
    ddp = [r for r in summary if r["run"] == "train_ddp"]
    power = pq.read_table(store.run_dir(SUITE, _suite_runs()["train_ddp"]) / "power.parquet").to_pylist()
    for r in ddp:
        mine = sorted((p for p in power if p["device_id"] == r["device_id"]), key=lambda p: p["ts_ns"])
        joules = mine[-1]["energy_j"] - mine[0]["energy_j"]
        assert r["mean_power_w"] == pytest.approx(joules / ((mine[-1]["ts_ns"] - mine[0]["ts_ns"]) / 1e9))
        assert r["peak_power_w"] == max(p["power_w"] for p in mine)


# --- bad input and the on-error policy -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_store(tmp_path_factory) -> Path:
    """A traced run with kernels plus a CPU-only run (NVTX, no kernels) made by nsys 2022.4."""
    root = tmp_path_factory.mktemp("mixed") / "store"
    make_store(root, kernels=[dict(start_ns=0, end_ns=1000, name="k")])
    traceql.ingest([NSYS2022 / "cpu_nvtx.sqlite"], root, require_kernels=False)
    return root


def test_on_error_skip_names_the_skipped_run_in_the_report(mixed_store, tmp_path):
    out = tmp_path / "r.html"
    rep = report(mixed_store, out, on_error="skip")
    assert len(rep.skipped) == 1 and "no CUDA kernels" in rep.skipped[0]["reason"]
    page = out.read_text()
    assert 'id="skipped"' in page and html.escape(rep.skipped[0]["run_id"]) in page
    with pytest.raises(BadInputError, match="no CUDA kernels.*--on-error skip"):
        report(mixed_store, tmp_path / "r2.html", on_error="raise")
    assert not (tmp_path / "r2.html").exists()  # nothing half-written


def test_cli_report_exit_codes(mixed_store, tmp_path):
    rc, out, err = run_cli("report", mixed_store, "-o", tmp_path / "a.html")
    assert rc == 2 and "no CUDA kernels" in err and "Traceback" not in err and not (tmp_path / "a.html").exists()
    rc, out, err = run_cli("report", mixed_store, "-o", tmp_path / "b.html", "--on-error", "skip")
    assert rc == 2 and "skipped run" in err and (tmp_path / "b.html").is_file()
    rc, out, err = run_cli("report", mixed_store, "-o", tmp_path / "c.html", "--recipe", tmp_path / "none.toml")
    assert rc == 2 and "none.toml" in err and "Traceback" not in err
    rc, out, err = run_cli("report", tmp_path / "not-there", "-o", tmp_path / "d.html")
    assert rc == 2 and "Traceback" not in err


# --- escaping, and the page in a real browser ----------------------------------------------------------------


def test_hostile_names_are_escaped_in_the_html(evil_store, tmp_path):
    out = tmp_path / "evil.html"
    rep = report(evil_store, out)
    worst = next(s for s in rep.sections if s.section.title == "Worst kernels").tables["kernels"].to_pylist()
    assert worst[0]["name"] == EVIL_KERNEL and worst[0]["slowdown"] == pytest.approx(0.5)
    page = out.read_text()
    assert "<script>alert(" not in page and "</script><script>" not in page
    assert html.escape(EVIL_KERNEL) in page  # the table cell
    # inside the chart JSON every '<' is \u003c, so the script element cannot be ended by a name
    specs = page[page.rindex("const specs = "):]
    assert "\\u003cscript\\u003ealert(1)" in specs


def _browser_or_skip():
    from traceql.report.browser import find_chromium

    required = os.environ.get("TRACEQL_REQUIRE_BROWSER") == "1"
    try:
        import playwright  # noqa: F401
    except ImportError:
        if required:
            pytest.fail("TRACEQL_REQUIRE_BROWSER=1 but the playwright package is missing")
        pytest.skip("playwright not installed")
    if find_chromium() is None:
        if required:
            pytest.fail("TRACEQL_REQUIRE_BROWSER=1 but no Chromium (apt-get install chromium)")
        pytest.skip("no Chromium")


def test_report_renders_offline_in_chromium(overlap_report, tmp_path):
    _browser_or_skip()
    from traceql.report.browser import check_page

    _, out = overlap_report
    shot = tmp_path / "overlap.png"
    check = check_page(out, shot)
    assert check.charts >= 10
    assert check.ok, check
    assert shot.stat().st_size > 50_000  # a full page of charts, not a blank one
    assert "contention" in check.text and "Slowdown per kernel signature" in check.text
    keep = os.environ.get("TRACEQL_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


def test_hostile_names_show_as_text_in_chromium(evil_store, tmp_path):
    _browser_or_skip()
    from traceql.report.browser import check_page

    out = report(evil_store, tmp_path / "evil.html").write(tmp_path / "evil.html")
    check = check_page(out, tmp_path / "evil.png")
    assert check.ok, check  # no alert() dialog, no error, every chart drawn
    assert "alert(1)</script>" in check.text  # shown as text, not run


def test_a_broken_page_is_detected_by_the_browser_check(tmp_path):
    """The check can fail: a page that asks the network for its script and has a chart that cannot render."""
    _browser_or_skip()
    from traceql.report.browser import check_page

    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><script src="https://cdn.jsdelivr.net/npm/vega@5"></script>'
                   '<div class="chart" id="chart-0"></div><script>document.body.dataset.chartsDone = "true";'
                   'document.body.dataset.chartsFailed = "1"; console.error("boom")</script></body></html>')
    check = check_page(bad)
    assert not check.ok and check.network_requests and check.console_errors and check.failed == 1


def _microbench_page(tmp_path: Path) -> Path:
    """The microbenchmark chart over the suite's real modes, on a page of its own (the whole recipe would compute the
    attribution of every run first, which this chart does not read)."""
    from traceql.report import Report, SectionResult
    from traceql.report.html import render_page

    con = traceql.connect(SUITE)
    modes = con.sql("""SELECT m.*, json_extract_string(r.labels_json, '$.name') AS run
                       FROM microbench_modes m JOIN runs r USING (run_id)""").to_arrow_table()
    runs = con.sql("SELECT run_id, run_id AS run, source_path, format, gpu_names, labels_json, 0 AS kernels "
                   "FROM runs").to_arrow_table()
    con.close()
    rec = recipes.load("microbench")
    section = next(s for s in rec.sections if s.chart == "microbench")
    out = tmp_path / "microbench.html"
    out.write_text(render_page(Report(rec, runs, [SectionResult(section, {"modes": modes})])))
    return out


@contextlib.contextmanager
def _chromium_page(path: Path):
    """A headless Chromium page (1400 x 1000) that has loaded ``path``; closed on leaving."""
    from playwright.sync_api import sync_playwright

    from traceql.report.browser import CHROMIUM_ARGS, find_chromium

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(path.resolve().as_uri())
            yield page
        finally:
            browser.close()


def test_microbench_panels_are_readable_in_chromium(tmp_path):
    """One panel per collective and configuration, each on its own scale: the longest bar of every panel spans its
    height or most of it (a shared scale flattened the short panels to a few pixels), and no two labels or titles
    overlap."""
    _browser_or_skip()
    with _chromium_page(_microbench_page(tmp_path)) as page:
        page.wait_for_function("document.body.dataset.chartsDone === 'true'", timeout=60_000)
        found = page.evaluate("""() => {
            const svg = document.querySelector('#chart-0 svg');
            const panels = [...svg.querySelectorAll('g.mark-group.role-scope.cell > g')].map(g => {
                const bars = [...g.querySelectorAll('g.mark-rect.role-mark path')].map(b => b.getBBox().height);
                return {height: g.querySelector('path.background').getBBox().height, tallest: Math.max(...bars),
                        bars: bars.length};
            });
            const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim())
                .map(t => { const r = t.getBoundingClientRect();
                            return {text: t.textContent, l: r.left, r: r.right, t: r.top, b: r.bottom}; });
            return {panels, texts, failed: document.body.dataset.chartsFailed};
        }""")
    con = traceql.connect(SUITE)
    expected = con.sql("SELECT count(DISTINCT (op, dtype, run_id)) FROM microbench_modes").fetchall()[0][0]
    con.close()
    assert found["failed"] == "0"
    panels = found["panels"]
    assert len(panels) == expected >= 10
    for panel in panels:
        assert panel["bars"] == 4
        assert panel["tallest"] >= 0.5 * panel["height"], panel  # a scale of its own (rounded up to a nice value)
    texts = found["texts"]
    overlapping = [(a["text"], b["text"]) for i, a in enumerate(texts) for b in texts[i + 1:]
                   if a["l"] < b["r"] - 1 and b["l"] < a["r"] - 1 and a["t"] < b["b"] - 1 and b["t"] < a["b"] - 1]
    assert not overlapping, overlapping[:5]


def test_timeline_specs_are_valid_vega_lite_with_each_runs_own_rows(overlap_report):
    """The timeline's structure is built once per set of lanes and filled with each run's rows: every filled spec
    is valid Vega-Lite, carries that run's segments and nothing of another run's."""
    import altair as alt

    from traceql.report.charts import CHARTS, Spec

    rep, _ = overlap_report
    timeline = next(s for s in rep.sections if s.section.chart == "timeline")
    seen = {}
    for label, tables in timeline.per_run:
        chart = CHARTS["timeline"].fn(tables, timeline.section.options)
        assert isinstance(chart, Spec)
        spec = chart.to_dict()
        alt.LayerChart.from_dict(spec, validate=True)  # raises on a spec Vega-Lite's schema refuses
        rows = spec["layer"][0]["data"]["values"]
        assert len(rows) == min(tables["segments"].num_rows, 20_000) and {r["run"] for r in rows} == {label}
        lanes = tuple(spec["layer"][0]["encoding"]["y"]["sort"])
        assert {r["lane"] for r in rows} <= set(lanes)
        skeleton = json.dumps({**spec, "layer": [{k: v for k, v in layer.items() if k != "data"}
                                                 for layer in spec["layer"]]}, sort_keys=True)
        assert seen.setdefault((lanes, len(spec["layer"]), spec["title"]), skeleton) == skeleton
    assert len(timeline.per_run) > len(seen)  # runs shared a structure (built once)


def test_split_by_run_keeps_each_runs_rows_in_order():
    import numpy as np
    import pyarrow as pa

    from traceql.report import _split_by_run

    rng = np.random.default_rng(3)
    ids = [f"{i:016x}" for i in (7, 2, 11, 5)]
    table = pa.table({"run_id": rng.choice(ids + ["not asked for"], 500), "x": np.arange(500)})
    parts = _split_by_run(table, ids + ["absent"])
    for run_id, part in zip(ids + ["absent"], parts, strict=True):
        want = [x for r, x in zip(table["run_id"].to_pylist(), table["x"].to_pylist(), strict=True) if r == run_id]
        assert part["x"].to_pylist() == want and set(part["run_id"].to_pylist()) <= {run_id}
    assert _split_by_run(table, ids[:1])[0] is table  # one run: the table as it is


def test_a_page_of_many_charts_draws_them_as_they_come_into_view(overlap_report, tmp_path):
    """Past EAGER_CHARTS charts a page draws the charts near the viewport only, the others as they are scrolled to;
    traceqlRenderAll (what the browser check calls) draws every one. The real runs' timelines, 40 times over."""
    _browser_or_skip()
    from traceql.report import Report, SectionResult
    from traceql.report.browser import check_page
    from traceql.report.html import EAGER_CHARTS, render_page

    rep, _ = overlap_report
    timeline = next(s for s in rep.sections if s.section.chart == "timeline")
    per_run = [(f"copy {k} of {label}", tables) for k in range(40) for label, tables in timeline.per_run[:1]]
    assert len(per_run) > EAGER_CHARTS
    out = tmp_path / "many.html"
    out.write_text(render_page(Report(rep.recipe, rep.runs, [SectionResult(timeline.section, {}, per_run)])))
    with _chromium_page(out) as page:
        page.wait_for_function("Number(document.body.dataset.chartsRendered) > 0", timeout=60_000)
        page.wait_for_timeout(500)
        first = page.evaluate("() => Number(document.body.dataset.chartsRendered)")
        page.evaluate("() => document.getElementById('chart-39').scrollIntoView()")
        page.wait_for_function("document.getElementById('chart-39').dataset.rendered === 'true'", timeout=60_000)
        page.wait_for_timeout(500)
        later = page.evaluate("() => Number(document.body.dataset.chartsRendered)")
    assert 0 < first < len(per_run) and first < later < len(per_run)
    check = check_page(out)
    assert check.ok and check.charts == check.rendered == check.svgs == len(per_run)
