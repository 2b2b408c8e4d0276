"""Attribution v2 foundations: every activity is a victim, like-for-like baselines, intervals, determinism.

Synthetic traces give exact known answers; the real H200 contention trace checks instance facts against an
independent per-instance computation, and that renaming every kernel that is not NCCL changes nothing.
"""

from __future__ import annotations

import json
import random
import shutil
import string

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import without_digests
from synthetic import NCCL_NAME, launches, make_store

from traceql import attribution, store
from traceql.attribute import attribute
from traceql.classify import classify_names
from traceql.store import schema

STEP_NS = 1_000_000


def _steps(n_steps: int, overlapped: set[int], *, slow: float = 1.2, nvtx: bool = True):
    """Steps of two launches of one GEMM signature (same grid, different K: 14 us and 595 us), NCCL beside the
    steps in ``overlapped`` (each kernel there ``slow`` times longer)."""
    kernels, comm, ranges = [], [], []
    corr = 1
    for i in range(n_steps):
        t = 10_000 + i * STEP_NS
        f = slow if i in overlapped else 1.0
        ranges.append(dict(start_ns=t - 100, end_ns=t + STEP_NS - 1000, text="step"))
        k0 = dict(start_ns=t, dur_ns=int(14_000 * f + (i % 3) * 50), name="gemm_tile", ctas=64, correlation_id=corr)
        k1 = dict(start_ns=t + 20_000, dur_ns=int(595_000 * f + (i % 3) * 700), name="gemm_tile", ctas=64,
                  correlation_id=corr + 1)
        corr += 2
        kernels += [k0, k1]
        if i in overlapped:
            comm.append(dict(start_ns=t - 50, end_ns=t + 700_000, name=NCCL_NAME, kind="comm", ctas=8,
                             stream_id=9))
    return kernels, comm, ranges if nvtx else [], launches(kernels) if nvtx else []


def _rows(result, **match) -> list[dict]:
    return [r for r in result.kernels.to_pylist() if all(r[k] == v for k, v in match.items())]


def test_signature_mixture_is_split_by_occurrence(tmp_path):
    kernels, comm, nvtx, api = _steps(16, overlapped=set(range(8, 16)))
    run = make_store(tmp_path / "s", kernels=kernels + comm, nvtx=nvtx, runtime_api=api)
    result = attribute(run)
    rows = sorted(_rows(result, name="gemm_tile"), key=lambda r: r["mode"])
    assert [(r["split"], r["mode"], r["n_isolated"], r["n_overlapped"]) for r in rows] == \
        [("duration mode", 0, 8, 8), ("duration mode", 1, 8, 8)]
    for r, t0 in zip(rows, (14_050, 595_700), strict=True):
        assert r["t0_ns"] == pytest.approx(t0, rel=0.01)
        assert r["slowdown"] == pytest.approx(0.2, abs=0.01)
        assert r["slowdown_lo"] <= r["slowdown"] <= r["slowdown_hi"]
        assert r["slowdown_lo"] > 0.1 and r["significant"] and not r["conflated"]
    (dev,) = [s for s in result.summary.to_pylist() if s["nvtx"] is None]
    assert dev["compute_slowdown"] == pytest.approx(0.2, abs=0.01)


def test_mixture_without_occurrence_is_reported_and_left_out(tmp_path):
    kernels, comm, _, _ = _steps(16, overlapped=set(range(8, 16)), nvtx=False)
    other = [dict(start_ns=20_000_000 + i * 10_000, dur_ns=5_000, name="plain_kernel", ctas=8) for i in range(4)]
    run = make_store(tmp_path / "s", kernels=kernels + comm + other)
    result = attribute(run)
    rows = _rows(result, name="gemm_tile")
    # the isolated instances form their two modes; the overlapped ones share no launch context with either. The
    # short ones (14 us x 1.2) cannot be the 595 us work (overlap does not make work 25% faster than alone): they
    # join mode 0; the long ones could be either, slowed or not
    (row,) = [r for r in rows if r["conflated"]]
    assert sorted((r["mode"], r["n_overlapped"], r["n_isolated"]) for r in rows if not r["conflated"]) == \
        [(0, 8, 8), (1, 0, 8)]
    (short,) = [r for r in rows if r["mode"] == 0]
    assert short["slowdown"] == pytest.approx(0.2, abs=0.01)
    assert row["n_overlapped"] == 8 and row["class"] == "conflated" and row["slowdown"] is None
    assert "mixture" in row["reason"]
    assert any("conflated" in n and "8 overlapped instances" in n for n in result.notes)
    (dev,) = [s for s in result.summary.to_pylist() if s["nvtx"] is None]
    assert dev["compute_slowdown"] == pytest.approx(0.2, abs=0.01)  # the short launches only: the rest is left out


def test_a_baseline_runs_mixture_is_split_by_its_launch_contexts(tmp_path):
    """A run overlapped throughout, against a baseline run whose isolated instances of one signature are two kinds of
    work: each instance is compared with the baseline run's instances of its own launch context (the k-th launch of
    the signature in its NVTX range), not with the median of the mixture."""
    kernels, comm, nvtx, api = _steps(8, overlapped=set(range(8)))
    run = make_store(tmp_path / "run", kernels=kernels + comm, nvtx=nvtx, runtime_api=api)
    kernels, _, nvtx, api = _steps(8, overlapped=set())
    nvtx = [dict(r, text="step of the baseline run") for r in nvtx]  # another text: the occurrence still tells
    base = make_store(tmp_path / "base", kernels=kernels, nvtx=nvtx, runtime_api=api, run_id="ba5e000000000001")
    rows = sorted(_rows(attribute(run, baseline=base), name="gemm_tile"), key=lambda r: r["mode"])
    assert [(r["split"], r["mode"], r["n_overlapped"], r["conflated"], r["baseline"]) for r in rows] == \
        [("duration mode", 0, 8, False, "baseline run"), ("duration mode", 1, 8, False, "baseline run")]
    for r, t0 in zip(rows, (14_050, 595_700), strict=True):
        assert r["t0_ns"] == pytest.approx(t0, rel=0.01)
        assert r["slowdown"] == pytest.approx(0.2, abs=0.01) and r["significant"]


def test_a_baseline_runs_mixture_without_a_shared_context_is_conflated(tmp_path):
    kernels, comm, nvtx, api = _steps(8, overlapped=set(range(8)))
    run = make_store(tmp_path / "run", kernels=kernels + comm, nvtx=nvtx, runtime_api=api)
    kernels, _, _, _ = _steps(8, overlapped=set(), nvtx=False)  # no ranges there: nothing to match with
    base = make_store(tmp_path / "base", kernels=kernels, run_id="ba5e000000000001")
    rows = _rows(attribute(run, baseline=base), name="gemm_tile")
    # only the short launches are told apart, by their duration (they cannot be the long work, 25% faster)
    assert sorted((r["mode"] is None, r["conflated"], r["n_overlapped"]) for r in rows) == [(False, False, 8),
                                                                                          (True, True, 8)]


def test_every_activity_is_a_victim(tmp_path):
    """A user kernel with a name no pattern knows, a copy, a set and the NCCL kernel itself all get rows."""
    kernels, memcpy, memset = [], [], []
    for i in range(12):
        t, beside = i * 100_000, i >= 6
        f = 1.5 if beside else 1.0
        kernels.append(dict(start_ns=t, dur_ns=int(20_000 * f) + i, name="zq_user_thing", ctas=132, kind="other"))
        memcpy.append(dict(start_ns=t + 30_000, dur_ns=int(10_000 * (1.3 if beside else 1.0)) + i, bytes=1 << 24))
        memset.append(dict(start_ns=t + 50_000, dur_ns=2_000 + i, bytes=1 << 20))
        kernels.append(dict(start_ns=t + 60_000 + (0 if beside else 20_000),
                            dur_ns=int(15_000 * (1.1 if beside else 1)), name=NCCL_NAME, kind="comm", ctas=16,
                            stream_id=9))
        if beside:  # a co-runner for the copy and for the NCCL kernel
            kernels.append(dict(start_ns=t + 29_000, dur_ns=50_000, name="other_user_kernel", ctas=4,
                                stream_id=11))
            kernels.append(dict(start_ns=t - 500, dur_ns=31_000, name="side_kernel", ctas=2, stream_id=12))
    run = make_store(tmp_path / "s", kernels=kernels, memcpy=memcpy, memset=memset)
    result = attribute(run)
    by = {(r["activity"], r["name"]): r for r in result.kernels.to_pylist()}
    user = by[("kernel", "zq_user_thing")]
    assert user["kind"] == "other" and user["n_overlapped"] == 6
    assert user["slowdown"] == pytest.approx(0.5, abs=0.01)
    assert user["significant"]
    copy = by[("memcpy", "[CUDA memcpy DtoD]")]
    assert copy["n_overlapped"] == 6 and copy["slowdown"] == pytest.approx(0.3, abs=0.01) and copy["significant"]
    nccl = by[("kernel", NCCL_NAME)]
    assert nccl["kind"] == "comm" and nccl["slowdown"] == pytest.approx(0.1, abs=0.01)
    assert ("memset", "[CUDA memset]") in by


def test_drifting_baseline_compares_with_nearby_instances(tmp_path):
    """Isolated durations grow 1% per step; overlapped instances are 10% longer than their neighbours."""
    kernels, comm = [], []
    for i in range(40):
        t = i * 100_000
        base = 50_000 * (1 + 0.01 * i)
        beside = i % 4 == 3
        kernels.append(dict(start_ns=t, dur_ns=int(base * (1.1 if beside else 1.0)), name="drifting", ctas=8))
        if beside:
            comm.append(dict(start_ns=t - 10, end_ns=t + 70_000, name=NCCL_NAME, kind="comm", ctas=8, stream_id=9))
    result = attribute(make_store(tmp_path / "s", kernels=kernels + comm))
    (row,) = _rows(result, name="drifting")
    assert row["baseline"] == "isolated nearest in time" and row["baseline_drift"]
    assert row["slowdown"] == pytest.approx(0.1, abs=0.01)
    assert row["slowdown_lo"] > 0.05 and row["significant"]


# -- real trace ------------------------------------------------------------------------------------------------


def _brute_force_overlaps(con: duckdb.DuckDBPyConnection) -> dict[tuple, tuple]:
    """Per activity, the union length of every other activity of each class clipped to it, by plain Python."""
    acts = con.sql("SELECT run_id, device_id, activity_id, start_ns, end_ns, corunner_kind FROM _activities "
                   "ORDER BY run_id, device_id, start_ns").fetchall()
    out = {}
    by_dev: dict[tuple, list] = {}
    for a in acts:
        by_dev.setdefault(a[:2], []).append(a)
    for rows in by_dev.values():
        for a in rows:
            lens = {}
            for cls in ("comm", "compute", "copy", None):
                pieces = sorted((max(a[3], b[3]), min(a[4], b[4])) for b in rows
                                if b[2] != a[2] and (cls is None or b[5] == cls) and b[3] < a[4] and b[4] > a[3])
                total, cur_s, cur_e = 0, None, None
                for s, e in pieces:
                    if cur_e is None or s > cur_e:
                        total += (cur_e - cur_s) if cur_e is not None else 0
                        cur_s, cur_e = s, e
                    else:
                        cur_e = max(cur_e, e)
                total += (cur_e - cur_s) if cur_e is not None else 0
                lens[cls] = total
            out[(a[0], a[2])] = (lens["comm"], lens["compute"], lens["copy"], lens[None])
    return out


def assert_overlaps_exact(con: duckdb.DuckDBPyConnection) -> int:
    """instance_facts' overlaps by class equal the brute-force computation; the number of activities compared."""
    expected = _brute_force_overlaps(con)
    got = {(r[0], r[1]): tuple(r[2:]) for r in con.sql(
        "SELECT run_id, activity_id, comm_overlap_ns, compute_overlap_ns, copy_overlap_ns, overlap_ns "
        "FROM instance_facts").fetchall()}
    assert got == expected
    return len(got)


def test_instance_facts_exact_against_brute_force(contention_parquet_run):
    con = store.connect(contention_parquet_run)
    assert assert_overlaps_exact(con) > 100
    kinds = {r[0] for r in con.sql("SELECT DISTINCT activity FROM instance_facts").fetchall()}
    assert kinds == {"kernel", "memcpy", "memset"}
    # cycles are the instance's own duration times its own clock
    bad = con.sql("SELECT count(*) FROM instance_facts WHERE gpc_clock_mhz IS NOT NULL "
                  "AND abs(cycles - dur_ns * gpc_clock_mhz / 1000) > 1e-6 * cycles").fetchall()[0][0]
    assert bad == 0


def _renamed_copy(src, dst, seed: int = 11) -> dict[str, str]:
    """A copy of a run store whose every kernel that is not communication has a random identifier for a name."""
    shutil.copytree(src, dst)
    rng = random.Random(seed)
    mapping: dict[str, str] = {}
    for path in (dst / "runs").glob("*/kernels.parquet"):
        t = pq.read_table(path)
        names = t.column("name").to_pylist()
        kinds = t.column("kind").to_pylist()
        new = []
        for n, k in zip(names, kinds, strict=True):
            if k == "comm" or n is None:
                new.append(n)
                continue
            if n not in mapping:
                mapping[n] = "k_" + "".join(rng.choices(string.ascii_lowercase + string.digits, k=12))
            new.append(mapping[n])
        cls = classify_names(new)
        lookup = {r["name"]: r for r in cls.to_pylist()}
        cols = {c: t.column(c) for c in t.column_names}
        cols["name"] = pa.array(new, pa.string())
        cols["short_name"] = pa.array(new, pa.string())
        for c in ("kind", "family"):
            cols[c] = pa.array([lookup[n][c] if n in lookup else None for n in new], pa.string())
        schema.write("kernels", pa.table(cols), path)
    without_digests(dst)  # files rewritten on purpose: the store is read by sizes and footers, as one written before
    return mapping


NAMELESS = ("name", "short_name", "kind", "group_id")


def _comparable(result) -> list[tuple]:
    rows = []
    for r in result.kernels.to_pylist():
        rows.append(tuple((k, round(v, 9) if isinstance(v, float) else v) for k, v in sorted(r.items())
                          if k not in NAMELESS))
    return sorted(rows, key=repr)


def test_renamed_kernels_give_the_same_attribution(tmp_path, contention_parquet_run):
    mapping = _renamed_copy(contention_parquet_run, tmp_path / "renamed")
    assert len(mapping) >= 4
    before = attribute(contention_parquet_run, group_by_nvtx="case:*")
    after = attribute(tmp_path / "renamed", group_by_nvtx="case:*")
    assert any(r["class"] not in ("none",) for r in before.kernels.to_pylist())
    assert _comparable(before) == _comparable(after)
    assert before.summary.to_pylist() == after.summary.to_pylist()


def test_output_is_deterministic(tmp_path, contention_parquet_run, train_ddp_run):
    first = json.dumps(attribute(contention_parquet_run).to_json(), default=str)
    con = duckdb.connect()
    con.execute("SET threads = 1")
    again = json.dumps(attribute(contention_parquet_run, con=con).to_json(), default=str)
    assert first == again
    # another run in the store changes nothing for this run's rows
    both = tmp_path / "both"
    shutil.copytree(contention_parquet_run, both)
    for rid, entry in store.read_manifest(train_ddp_run)["runs"].items():
        shutil.copytree(store.run_dir(train_ddp_run, rid), store.run_dir(both, rid))
        with store.locked_manifest(both) as manifest:
            manifest["runs"][rid] = entry
    alone = json.loads(first)
    mixed = attribute(both).to_json()
    rid = alone["runs"][0]["run_id"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "group_id"} for r in rows if r["run_id"] == rid]  # noqa: E731
    assert strip(json.loads(json.dumps(mixed["kernels"], default=str))) == strip(alone["kernels"])


def test_sql_command_prepares_baselines(contention_parquet_run):
    con = store.connect(contention_parquet_run)
    assert attribution.needs_prepare("SELECT * FROM kernel_attribution")
    assert not attribution.needs_prepare("SELECT * FROM kernels")
    attribution.prepare(con)
    n = con.sql("SELECT count(*) FROM kernel_attribution WHERE activity = 'memcpy'").fetchall()[0][0]
    assert n > 0
