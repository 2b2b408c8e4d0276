"""traceql diff: matching, intervals against run-to-run noise, gates, the report, on synthetic runs with known
answers and on the real overlap microbenchmark at NCCL_MAX_CTAS 2 and 8 (tests/data/h200/suite, 2 x H200).

The synthetic program: per ``step`` NVTX range, three GEMMs (the third 10% longer beside an NCCL kernel) and one
small kernel. A repeat of it has other timing noise; the changed program has 20% slower GEMMs, an NCCL kernel with
twice the CTAs taking half the time, and another small kernel (named like a script, to test escaping).
"""

from __future__ import annotations

import html
import itertools
import json
import math
import os

import numpy as np
import pytest
from conftest import H200, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import launches, make_store

from traceql import gates, stats
from traceql.diff import diff, energy
from traceql.diff_match import match_signatures, normalizer, nvtx_label_changes
from traceql.diff_model import GATE_COLUMNS, RUN_NOISE
from traceql.errors import BadInputError
from traceql.report import report
from traceql.report.diff import load_diff_recipe

SUITE = H200 / "suite"
GEMM_NS, COMM_NS, STEPS = 100_000, 60_000, 12
EVIL = 'void evil<"</script><script>alert(1)</script>&">(float*)'


def program(root, run_id, *, seed, slower=1.0, comm_ctas=4, comm_ns=COMM_NS, small="dropout_kernel",
            gpu_name="NVIDIA H200", gemm="gemm_bf16_kernel"):
    rng = np.random.default_rng(seed)
    kernels, nvtx, corr = [], [], itertools.count(1)
    t = 1_000_000
    for _ in range(STEPS):
        start = t
        for j in range(3):
            d = int(GEMM_NS * slower * (1.1 if j == 2 else 1.0) * (1 + rng.normal(0, 0.004)))
            kernels.append(dict(start_ns=t, end_ns=t + d, name=gemm, ctas=132, correlation_id=next(corr)))
            if j == 2:
                c = int(comm_ns * (1 + rng.normal(0, 0.004)))
                kernels.append(dict(start_ns=t, end_ns=t + c, kind="comm", ctas=comm_ctas, stream_id=9,
                                    correlation_id=next(corr)))
            t += d + 5_000
        kernels.append(dict(start_ns=t, end_ns=t + 2_000, name=small, ctas=8, correlation_id=next(corr)))
        t += 7_000
        nvtx.append(dict(text="step", start_ns=start - 500, end_ns=t - 1_000))  # closed before the next launch
    return make_store(root, kernels=kernels, runtime_api=launches(kernels), nvtx=nvtx, run_id=run_id,
                      gpu_name=gpu_name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff") / "store"
    program(root, "a000000000000001", seed=1)
    program(root, "a000000000000002", seed=2)
    program(root, "b000000000000001", seed=3, slower=1.2, comm_ctas=8, comm_ns=COMM_NS // 2, small=EVIL)
    return root


@pytest.fixture(scope="module")
def repeated(runs):
    return diff(f"{runs}@a000000000000001", f"{runs}@a000000000000002", group_by_nvtx="step")


@pytest.fixture(scope="module")
def changed(runs):
    return diff(f"{runs}@a000000000000001", f"{runs}@b000000000000001", group_by_nvtx="step")


# --- synthetic runs with known answers ----------------------------------------------------------------------------


def test_the_same_program_twice_is_no_significant_change(repeated):
    assert [v["changed"] for v in repeated.verdicts] == [False]
    assert "no significant change" in repeated.verdicts[0]["text"]
    assert not any(repeated.kernels.column("significant").to_pylist())
    assert set(repeated.kernels.column("match").to_pylist()) == {"exact"}
    assert not any(v for v in repeated.metrics.column("significant").to_pylist() if v is not None)
    row = repeated.summary.to_pylist()[0]
    assert row["steps_a"] == row["steps_b"] == STEPS
    assert row["step_ms_lo"] < 0 < row["step_ms_hi"]


def test_a_slower_kernel_is_named_with_an_interval_that_holds_the_true_change(changed):
    rows = {r["short_name"]: r for r in changed.kernels.to_pylist()}
    gemm = rows["gemm_bf16_kernel"]
    assert gemm["match"] == "exact" and gemm["direction"] == "slower" and gemm["significant"]
    assert gemm["change_lo"] < 0.20 < gemm["change_hi"] and gemm["change_lo"] > 0
    assert gemm["change"] == pytest.approx(0.20, abs=0.01)
    assert gemm["n_a"] == gemm["n_b"] == 3 * STEPS
    assert gemm["time_delta_ns"] == pytest.approx(3.1 * GEMM_NS * 0.2, rel=0.02)  # per step


def test_a_kernel_whose_launch_shape_changed_is_matched_by_name(changed):
    comm = next(r for r in changed.kernels.to_pylist() if r["kind"] == "comm")
    assert comm["match"] == "name" and comm["launch_a"].startswith("grid 4x1x1") and comm["launch_b"].startswith(
        "grid 8x1x1")
    assert comm["direction"] == "faster" and comm["change_hi"] < 0
    assert comm["change"] == pytest.approx(-0.5, abs=0.01)
    text = changed.verdicts[0]["text"]
    assert "grid 4x1x1 -> 8x1x1" in text and "changed" in text


def test_new_and_vanished_signatures(changed):
    by_match = {r["match"]: r for r in changed.kernels.to_pylist()}
    assert by_match["new"]["name"] == EVIL and by_match["new"]["n_b"] == STEPS and by_match["new"]["n_a"] == 0
    assert by_match["vanished"]["name"] == "dropout_kernel"
    row = changed.summary.to_pylist()[0]
    assert (row["new_signatures"], row["vanished_signatures"], row["shape_changes"], row["slower_signatures"],
            row["faster_signatures"], row["matched_signatures"]) == (1, 1, 1, 1, 1, 2)


def test_the_waterfall_adds_up_to_the_step_time_change(changed):
    rows = changed.waterfall.to_pylist()
    assert [r["item"] for r in rows][0] == "A step" and rows[-1]["item"] == "B step"
    items = rows[1:-1]
    assert sum(r["delta_ms"] for r in items) == pytest.approx(rows[-1]["end_ms"] - rows[0]["end_ms"], abs=1e-9)
    for prev, r in zip(rows[:-1], items, strict=False):
        assert r["start_ms"] == pytest.approx(prev["end_ms"])
    # the step grew by the GEMMs' extra 20% (3.1 GEMMs a step); the small kernels take 2 us on both sides
    expected = 3.1 * GEMM_NS * 0.2 / 1e6
    step = next(r for r in changed.metrics.to_pylist() if r["metric"] == "step_ms")
    assert step["delta"] == pytest.approx(expected, rel=0.03) and step["lo"] > 0 and step["significant"]
    work = next(r for r in items if r["item"] == "compute work")["delta_ms"]
    lost = sum(r["delta_ms"] for r in items if r["item"].startswith("lost: "))
    assert work + lost == pytest.approx(expected, rel=0.03)


def test_json_contract_and_files(changed, tmp_path):
    doc = json.loads(json.dumps(changed.to_json()))
    assert doc["schema_version"] == 1 and doc["changed"] is True and doc["group_by_nvtx"] == "step"
    assert {"summary", "kernels", "steps", "waterfall", "verdicts", "label_changes", "notes", "a", "b"} <= set(doc)
    assert all(not (isinstance(v, float) and math.isnan(v)) for r in doc["kernels"] for v in r.values())
    changed.write(tmp_path / "out")
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"diff.json", "summary.parquet", "metrics.parquet",
                                                               "kernels.parquet", "steps.parquet",
                                                               "waterfall.parquet"}


def test_gates_over_the_summary(changed, repeated):
    summary = changed.summary.to_pylist()
    ok = [gates.parse(g, GATE_COLUMNS) for g in ("new_signatures <= 1", "step_ms.rel < 25%", "step_ms.lo > 0")]
    bad = [gates.parse(g, GATE_COLUMNS) for g in ("step_ms.delta < 0.01", "slower_signatures == 0")]
    violations, _ = gates.check(ok + bad, summary, lambda r: r["device"])
    assert sorted(v.gate for v in violations) == ["slower_signatures == 0", "step_ms.delta < 0.01"]
    assert "step_ms.delta = 0.0" in violations[0].describe() or "step_ms.delta = 0.0" in violations[1].describe()
    assert gates.check(bad, repeated.summary.to_pylist(), lambda r: r["device"])[0] == []
    with pytest.raises(gates.GateError, match="no device has a value"):
        gates.check([gates.parse("energy_j.delta < 1", GATE_COLUMNS)], summary, lambda r: r["device"])


def test_cli_gates_exit_1_and_list_the_violated_ones(runs, tmp_path):
    rc, out, err = run_cli("diff", f"{runs}@a000000000000001", f"{runs}@b000000000000001", "--group-by-nvtx", "step",
                           "--gate", "step_ms.delta < 0.01", "--gate", "new_signatures == 1", "-f", "json",
                           "-o", tmp_path / "out", "--html", tmp_path / "diff.html", timeout=300)
    assert rc == 1, err
    assert "gate 'step_ms.delta < 0.01' violated on GPU 0 (step_ms.delta = " in err
    assert "gate 'new_signatures == 1': ok" in err and "Traceback" not in err
    assert json.loads(out)["kernels"] and (tmp_path / "out" / "diff.json").is_file()
    assert (tmp_path / "diff.html").stat().st_size > 100_000


@pytest.mark.parametrize("gate, message", [
    ("nope < 1", "unknown column 'nope'"),
    ("step_ms.median < 1", "unknown part .median"),
    ("step_ms <", "incomplete clause"),
    ("step_ms < 1 xor step_ms > 0", "expected 'and', 'or' or the end"),
    ("__import__('os') < 1", "unexpected"),
    ("slower_signatures.delta == 0", "one value per device"),
])
def test_cli_refuses_a_bad_gate_before_reading_anything(gate, message, tmp_path):
    rc, _, err = run_cli("diff", tmp_path / "missing-a", tmp_path / "missing-b", "--gate", gate)
    assert rc == 2 and message in err and "Traceback" not in err


def test_cli_bad_inputs(runs, tmp_path):
    other = tmp_path / "other"
    program(other, "c000000000000001", seed=4, gpu_name="NVIDIA H100 80GB HBM3")
    program(other, "c000000000000002", seed=5, gemm="another_kernel", small="another_small")
    cases = [
        ((f"{runs}@a000000000000001", f"{other}@c000000000000001"), "different GPU models"),
        ((f"{runs}@a000000000000001", f"{other}@c000000000000002"), None),  # shares only the NCCL kernel: fine
        ((f"{runs}@a000000000000001", f"{runs}@zzz"), "matches no run"),
        ((f"{runs}@a000000000000001", tmp_path / "nowhere"), "no such run directory or trace"),
        ((f"{runs}@a", f"{runs}@b000000000000001"), "matches 2 runs"),
    ]
    for (a, b), message in cases:
        if message is None:
            continue
        rc, _, err = run_cli("diff", a, b)
        assert rc == 2 and message in err and "Traceback" not in err, (a, b, err)
    none_in_common = tmp_path / "none"
    make_store(none_in_common, kernels=[dict(start_ns=0, end_ns=1000, name="unrelated", correlation_id=1)],
               run_id="d000000000000001")
    rc, _, err = run_cli("diff", f"{runs}@a000000000000001", none_in_common)
    assert rc == 2 and "no kernel name in common" in err


def test_diff_recipes_and_run_recipes_are_not_interchangeable(runs, tmp_path):
    with pytest.raises(BadInputError, match="kind 'diff'"):
        report(runs, tmp_path / "x.html", recipe="diff")
    with pytest.raises(BadInputError, match="kind 'runs'"):
        load_diff_recipe("overlap")
    own = tmp_path / "mine.toml"
    own.write_text('kind = "diff"\n[[section]]\ntitle = "t"\ntable = "k"\n[section.queries]\nk = "diff_kernels"\n')
    with pytest.raises(BadInputError, match='scope = "all"'):
        load_diff_recipe(own)
    own.write_text('kind = "diff"\n[[section]]\nscope = "all"\ntitle = "t"\ntable = "k"\n[section.queries]\n'
                   'k = "kernel_attribution"\n')
    with pytest.raises(BadInputError, match="no view 'kernel_attribution'"):
        load_diff_recipe(own)


def test_diff_report_escapes_names_and_renders_offline_in_chromium(changed, tmp_path):
    from test_report import _browser_or_skip

    from traceql.report.diff import diff_report

    out = tmp_path / "diff.html"
    rep = diff_report(changed)
    rep.write(out)
    page = out.read_text()
    assert "<script>alert(" not in page and html.escape(EVIL) in page
    assert {s.section.chart for s in rep.sections if s.section.chart} == {"diff_bars", "diff_waterfall",
                                                                         "diff_signatures"}
    _browser_or_skip()
    from traceql.report.browser import check_page

    check = check_page(out, tmp_path / "diff.png")
    assert check.ok, check
    assert check.charts == 3 and "The step-time change by cause" in check.text and "alert(1)</script>" in check.text


# --- pieces ---------------------------------------------------------------------------------------------------------


def _sig(name, grid, first, nvtx=None, activity="kernel"):
    return dict(activity=activity, name=name, grid=grid, block="128x1x1", dynamic_smem_bytes=0, bytes=None, nvtx=nvtx,
                first_ns=first)


def test_signatures_match_by_name_and_shape_then_by_name_in_order_of_first_occurrence():
    a = [_sig("gemm", "2x1x1", 10), _sig("gemm", "4x1x1", 20), _sig("gemm", "6x1x1", 30), _sig("old", "1x1x1", 5)]
    b = [_sig("gemm", "4x1x1", 20), _sig("gemm", "9x1x1", 35), _sig("gemm", "7x1x1", 12), _sig("new", "1x1x1", 1)]
    got = {(m, x and x["grid"], y and y["grid"], (x or y)["name"]) for m, x, y in match_signatures(a, b, lambda t: t)}
    assert got == {("exact", "4x1x1", "4x1x1", "gemm"), ("name", "2x1x1", "7x1x1", "gemm"),
                   ("name", "6x1x1", "9x1x1", "gemm"), ("vanished", "1x1x1", None, "old"),
                   ("new", None, "1x1x1", "new")}


def test_nvtx_labels_that_describe_the_change_are_left_out_of_step_names():
    class S:
        def __init__(self, texts):
            self.signatures = [dict(nvtx=t) for t in texts]
            self.windows = []

    a = S(["case:x;mode=comm;max_ctas=2;world=2", "case:x;mode=compute;max_ctas=2;world=2"])
    b = S(["case:x;mode=comm;max_ctas=8;world=2", "case:x;mode=compute;max_ctas=8;world=2"])
    changed = nvtx_label_changes(a, b)
    assert changed == {"max_ctas": ("2", "8")}  # mode varies within a side, world does not differ
    norm = normalizer(changed)
    assert norm("case:x;mode=comm;max_ctas=2;world=2") == norm("case:x;mode=comm;max_ctas=8;world=2") == \
        "case:x;mode=comm;world=2"


@pytest.mark.parametrize("text, column, part, op, value", [
    ("compute_slowdown < 0.15", "compute_slowdown", "b", "<", 0.15),
    ("exposed_comm_ms.delta<5", "exposed_comm_ms", "delta", "<", 5.0),
    ("step_ms.rel <= 2%", "step_ms", "rel", "<=", 0.02),
    ("energy_j.a != -1e3", "energy_j", "a", "!=", -1000.0),
    ("new_signatures == 0", "new_signatures", None, "==", 0.0),
])
def test_gate_clauses(text, column, part, op, value):
    clause = gates.parse(text, GATE_COLUMNS).any_of[0][0]
    assert (clause.column, clause.part, clause.op, clause.value) == (column, part, op, pytest.approx(value))


def test_gate_logic_is_three_valued_and_and_binds_tighter():
    g = gates.parse("step_ms.lo > 0 or step_ms < 10 and steps == 4", GATE_COLUMNS)
    assert len(g.any_of) == 2 and len(g.any_of[1]) == 2
    assert gates.holds(g, {"step_ms_lo": None, "step_ms_b": 5, "steps_b": 4}) is True
    assert gates.holds(g, {"step_ms_lo": None, "step_ms_b": 50, "steps_b": 4}) is None
    assert gates.holds(g, {"step_ms_lo": -1, "step_ms_b": 50, "steps_b": 4}) is False


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False),
       st.sampled_from(sorted(gates.OPERATORS)))
def test_a_gate_holds_exactly_when_its_comparison_does(value, threshold, op):
    g = gates.parse(f"span_ms.delta {op} {threshold!r}", GATE_COLUMNS)
    assert gates.holds(g, {"span_ms_delta": value}) is gates.OPERATORS[op](value, float(repr(threshold)))


def test_mann_whitney_null_distribution_is_exact():
    for m, n in [(1, 4), (2, 3), (3, 5), (4, 4), (5, 2)]:
        counts = np.zeros(m * n + 1)
        for xs in itertools.combinations(range(m + n), m):
            counts[sum(1 for i in xs for j in range(i) if j not in xs)] += 1
        assert np.allclose(stats._mann_whitney_cdf(m, n), np.cumsum(counts) / counts.sum())


def test_shift_ratio_interval_needs_four_a_side_and_finds_a_clear_shift():
    r, lo, hi = stats.shift_ratio_ci([10, 11, 12, 13], [5, 5.5, 6, 6.5])
    assert lo <= r <= hi < 0 and r == pytest.approx(-0.5, abs=0.02)
    assert math.isnan(stats.shift_ratio_ci([10, 11, 12], [5, 6, 7, 8])[1])  # C(7, 3) = 35 < 40: none at 95%
    r, lo, hi = stats.shift_ratio_ci([10, 11, 12, 13], [10.5, 11.5, 12.5, 9])
    assert lo < 0 < hi


def test_difference_interval_is_mover():
    d, lo, hi = stats.difference_interval(1.0, 0.7, 1.4, 2.0, 1.6, 2.3)
    assert d == 1.0 and lo == pytest.approx(1.0 - math.hypot(0.4, 0.4)) and hi == pytest.approx(1.0 + math.hypot(0.3,
                                                                                                                0.3))


def test_mean_intervals_hold_their_estimates():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 5, 50), rng.normal(110, 5, 60)
    r, lo, hi = stats.mean_ratio_ci(a, b, key=("t",))
    assert lo < r < hi and lo < 0.1 < hi
    d, lo, hi = stats.mean_difference_ci(a, b, key=("t",))
    assert lo < d < hi and lo < 10 < hi


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2_000_000_000), st.integers(1, 3_000_000_000), st.integers(5, 40))
def test_energy_bracket_holds_the_true_energy(start, length, sample_ms):
    """A counter at 500 W published every 100 ms and sampled every sample_ms: the bracket of any window inside the
    samples holds the true energy, however short the window."""
    ts = np.arange(0, 6_000_000_000, sample_ms * 1_000_000, dtype=np.int64)
    published = (ts // 100_000_000) * 100_000_000
    power = {"run_id": ["r"] * len(ts), "device_id": np.zeros(len(ts), dtype=np.int32), "ts_ns": ts,
             "power_w": np.full(len(ts), 500.0), "energy_j": published * 500.0 / 1e9}
    got = energy([dict(run_id="r", device_id=0, start_ns=start, end_ns=start + length)], power)
    _, lo, hi, extent = got[("r", 0)]
    true = length * 500.0 / 1e9
    assert lo - 1e-9 <= true <= hi + 1e-9 and extent == length


def test_mean_power_never_exceeds_the_power_sampled_over_its_window(h200x2_all_store):
    """Every committed 2 x H200 run's NVML samples, windows of 1 ms to 2 s across each run: the energy's point and its
    bracket, over the window's duration, lie within the power sampled from the last sample at or before the window
    to the first at or after it (a window of a few ms once got a mean power of several kW from samples under 710 W)."""
    import traceql

    con = traceql.connect(h200x2_all_store)
    power = con.sql("SELECT run_id, device_id, ts_ns, power_w, energy_j FROM power "
                    "ORDER BY run_id, device_id, ts_ns").fetchnumpy()
    con.close()
    run, dev, ts, watts = (np.asarray(power[c]) for c in ("run_id", "device_id", "ts_ns", "power_w"))
    checked = 0
    for key in sorted({(r, int(d)) for r, d in zip(run, dev, strict=True)}):
        sel = (run == key[0]) & (dev == key[1])
        t, p = ts[sel], watts[sel].astype(float)
        for length in (1_000_000, 5_000_000, 20_000_000, 100_000_000, 2_000_000_000):
            for start in np.linspace(t[0], t[-1] - length, 25).astype(np.int64):
                got = energy([dict(run_id=key[0], device_id=key[1], start_ns=int(start), end_ns=int(start) + length)],
                             power).get(key)
                if got is None:  # past the last published value
                    continue
                first = np.searchsorted(t, start, side="right") - 1
                last = np.searchsorted(t, start + length, side="left")
                most, least = p[first:last + 1].max(), p[first:last + 1].min()
                for joules in got[:3]:
                    assert least - 1e-6 <= joules / (length / 1e9) <= most + 1e-6, (key, start, length, got, most)
                checked += 1
    assert checked > 1000


def test_diff_mean_power_lies_within_the_samples(ddp_repeat, h200x2_all_store):
    """diff's mean power of each device, over its steps, is at most the most power sampled on it."""
    import traceql

    con = traceql.connect(h200x2_all_store)
    most = dict(con.sql("SELECT r.labels_json->>'name' || '/GPU ' || p.device_id, max(p.power_w) FROM power p "
                        "JOIN runs r USING (run_id) GROUP BY ALL").fetchall())
    con.close()
    for r in ddp_repeat.summary.to_pylist():
        for side, name in (("a", "train_ddp"), ("b", "train_ddp_repeat")):
            assert 0 < r[f"mean_power_w_{side}"] <= most[f"{name}/{r['device']}"]


# --- real runs: the overlap microbenchmark at NCCL_MAX_CTAS 2 and 8 (2 x H200) ----------------------------------


@pytest.fixture(scope="module")
def ctas(tmp_path_factory):
    return diff(f"{SUITE}@overlap_ctas2", f"{SUITE}@overlap_ctas8", group_by_nvtx="case:*")


def test_real_ctas_pair_names_the_change(ctas):
    changes = {(c["source"], c["key"]): (c["a"], c["b"]) for c in ctas.label_changes}
    assert changes[("run label", "env.NCCL_MAX_CTAS")] == ("2", "8")
    assert changes[("NVTX label", "max_ctas")] == ("2", "8")
    nccl = [r for r in ctas.kernels.to_pylist() if r["short_name"] == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]
    assert {r["device"] for r in nccl} == {"GPU 0", "GPU 1"} and len(nccl) == 6  # 3 cases with all-reduce, 2 GPUs
    for r in nccl:
        assert r["match"] == "name" and "grid 2x1x1" in r["launch_a"] and "grid 8x1x1" in r["launch_b"]
        assert r["direction"] == "faster" and r["change_hi"] < -0.4, r
    for m in ctas.metrics.to_pylist():
        if m["metric"] in ("exposed_comm_ms", "step_ms", "comm_ms"):
            assert m["significant"] and m["hi"] < 0, m
    for v in ctas.verdicts:
        assert v["changed"] and "grid 2x1x1 -> 8x1x1" in v["text"]


def test_real_ctas_pair_finds_no_change_in_the_work_it_cannot_touch(ctas):
    """The compute-only mode runs the same GEMMs alone in both runs: no significant change, in the step and in every
    kernel of it (the same program's identical work, measured in two runs)."""
    compute = [r for r in ctas.steps.to_pylist() if ";mode=compute;" in (r["step"] or "")]
    assert len(compute) == 2  # one range a run on each GPU: one measurement, no interval, and well inside the noise
    for r in compute:
        assert not r["significant"] and abs(r["change"]) < RUN_NOISE / 4, r
    alone = [r for r in ctas.kernels.to_pylist() if r["nvtx"] and ";mode=compute;" in r["nvtx"]]
    gemms = [r for r in alone if r["short_name"].startswith("nvjet")]
    assert len(gemms) == 2 and all(r["n_a"] == r["n_b"] == 4 for r in gemms)
    for r in alone:
        assert not r["significant"], r
    for r in gemms:  # four a side: the exact Mann-Whitney interval
        assert r["statistic"] == "pairwise median" and r["change_lo"] < 0 < r["change_hi"], r


def test_real_ctas_waterfall_puts_the_change_on_exposed_communication(ctas):
    for device in ("GPU 0", "GPU 1"):
        rows = [r for r in ctas.waterfall.to_pylist() if r["device"] == device]
        items = rows[1:-1]
        assert sum(r["delta_ms"] for r in items) == pytest.approx(rows[-1]["end_ms"] - rows[0]["end_ms"], abs=1e-9)
        biggest = max(items, key=lambda r: abs(r["delta_ms"]))
        assert biggest["item"] == "exposed communication" and biggest["delta_ms"] < -5


def test_real_cli_diff_with_gates(tmp_path):
    # a wide table (COLUMNS), so that the cells looked for are on one line (100 columns fold them)
    rc, out, err = run_cli("diff", f"{SUITE}@overlap_ctas2", f"{SUITE}@overlap_ctas8",
                           "--gate", "exposed_comm_ms.delta < 0", "--gate", "span_ms.rel > 0", timeout=300,
                           env={**os.environ, "COLUMNS": "220"})
    assert rc == 1, err
    assert "env.NCCL_MAX_CTAS 2 -> 8" in out and "gate 'exposed_comm_ms.delta < 0': ok" in out
    assert "gate 'span_ms.rel > 0' violated on GPU 0" in out and "gate 'span_ms.rel > 0' violated on GPU 1" in out
    assert "name (grid 2x1x1 -> 8x1x1)" in out


# --- real runs: DDP training on 2 x H200 twice, and with NCCL_MAX_CTAS=2 (tests/data/h200x2) -----------------------


@pytest.fixture(scope="module")
def ddp_repeat(h200x2_all_store):
    return diff(f"{h200x2_all_store}@train_ddp", f"{h200x2_all_store}@train_ddp_repeat", group_by_nvtx="case:train*")


@pytest.fixture(scope="module")
def ddp_ctas2(h200x2_all_store):
    return diff(f"{h200x2_all_store}@train_ddp", f"{h200x2_all_store}@train_ddp_ctas2", group_by_nvtx="case:train*")


def test_real_training_run_twice_is_no_significant_change(ddp_repeat):
    """The same DDP program run twice, both GPUs at their power limit: nothing is reported as changed, although the
    optimizer's kernels moved by up to 9% within a step and an all-reduce by 13% between the runs."""
    assert [v["changed"] for v in ddp_repeat.verdicts] == [False, False]
    assert all("no significant change" in v["text"] for v in ddp_repeat.verdicts)
    rows = ddp_repeat.kernels.to_pylist()
    assert len(rows) > 500 and {r["match"] for r in rows} == {"exact"}
    assert not any(r["significant"] for r in rows)
    assert max(abs(r["change"]) for r in rows if r["short_name"] == "multi_tensor_apply_kernel") > 0.05
    assert {(c["key"]) for c in ddp_repeat.label_changes} == {"name", "collected_at"}
    for r in ddp_repeat.summary.to_pylist():
        assert r["steps_a"] == r["steps_b"] == 9
        assert r["step_ms_lo"] < 0 < r["step_ms_hi"] and abs(r["step_ms_rel"]) < 0.02
        assert not any(r[f"{m}_significant"] for m in ("compute_ms", "comm_ms", "exposed_comm_ms", "energy_j"))


def test_real_training_run_with_nccl_max_ctas_2_names_the_change(ddp_ctas2):
    changes = {c["key"]: (c["a"], c["b"]) for c in ddp_ctas2.label_changes}
    assert changes["env.NCCL_MAX_CTAS"] == (None, "2")
    nccl = [r for r in ddp_ctas2.kernels.to_pylist() if r["kind"] == "comm" and r["match"] == "name"]
    assert {r["device"] for r in nccl} == {"GPU 0", "GPU 1"}
    for r in nccl:
        assert "grid 2x1x1" in r["launch_b"] and "grid 2x1x1" not in r["launch_a"]
        assert r["direction"] == "slower" and r["change_lo"] > 2, r  # at least 3x as long with 2 CTAs
    for r in ddp_ctas2.summary.to_pylist():
        assert r["changed"] and "ncclDevKernel_AllReduce" in r["verdict"]
        assert r["step_ms_significant"] and r["step_ms_lo"] > 0
        assert r["exposed_comm_ms_significant"] and r["exposed_comm_ms_lo"] > 0
    for device in ("GPU 0", "GPU 1"):
        rows = [r for r in ddp_ctas2.waterfall.to_pylist() if r["device"] == device]
        assert sum(r["delta_ms"] for r in rows[1:-1]) == pytest.approx(rows[-1]["end_ms"] - rows[0]["end_ms"])
        assert max(rows[1:-1], key=lambda r: abs(r["delta_ms"]))["item"] == "exposed communication"


def test_real_gates_pass_on_the_repeated_run_and_fail_on_the_changed_one(h200x2_all_store):
    gate = ["--gate", "slower_signatures == 0 and faster_signatures == 0", "--gate", "exposed_comm_ms.lo < 5"]
    rc, out, err = run_cli("diff", f"{h200x2_all_store}@train_ddp", f"{h200x2_all_store}@train_ddp_repeat", *gate,
                           timeout=600)
    assert rc == 0, out + err
    assert "gate 'slower_signatures == 0 and faster_signatures == 0': ok" in out
    rc, out, err = run_cli("diff", f"{h200x2_all_store}@train_ddp", f"{h200x2_all_store}@train_ddp_ctas2", *gate,
                           timeout=600)
    assert rc == 1 and "gate 'slower_signatures == 0 and faster_signatures == 0' violated on GPU 0" in out, out + err
