"""Steps' critical paths and what each loss cost the step (traceql.attribution.paths): exact answers on small
timelines built by hand, and the expectations of tests/data/h200x2_paths/EXPECTED.md (written before that trace was
collected) on a real DDP run on 2 x H200 with a known slow rank, recorded with CUDA event tracing."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from h200x2 import build_store, by_step

from traceql.attribution import paths

STEP = "case:train;step=0"
SM = np.array([1.0, 0, 0, 0, 0, 0])  # a group whose loss is all SMs taken


def _run(acts: list[dict], waits: list[dict] = ()) -> paths._Run:
    """A run of hand-made activities (the columns of _path_activities), every one in STEP, with its loss beyond
    its baseline (``loss``, ns) counted as SMs taken."""
    rows = []
    for i, a in enumerate(acts):
        dur = a["end"] - a["start"]
        rows.append(dict(run_id="r", device_id=a.get("dev", 0), activity_id=i, kind=a.get("kind", "compute"),
                         activity="kernel", global_pid=a.get("dev", 0), stream_id=a["stream"],
                         correlation_id=a["corr"], start_ns=a["start"], end_ns=a["end"],
                         launch_ns=a.get("launch", 0), launch_tid=a.get("dev", 0), nvtx=STEP, nvtx_start_ns=0,
                         group_id=1 if a.get("loss") else None, t0_ns=float(dur - a["loss"]) if a.get("loss") else None,
                         work_ns=a.get("work", dur), late_activity_id=a.get("late"), collective=a.get("coll")))
    rows.sort(key=lambda r: (r["global_pid"], r["stream_id"], r["correlation_id"]))
    w = pa.Table.from_pylist([dict(run_id="r", **x) for x in waits], schema=pa.schema(
        [("run_id", pa.string()), ("global_pid", pa.int64()), ("stream_id", pa.int64()), ("correlation_id", pa.int64()),
         ("record_stream_id", pa.int64()), ("record_correlation_id", pa.int64())]))
    calls = pa.table({"run_id": pa.array([], pa.string()), "global_pid": pa.array([], pa.int64()),
                      "global_tid": pa.array([], pa.int64()), "start_ns": pa.array([], pa.int64()),
                      "end_ns": pa.array([], pa.int64())})
    schema = pa.schema([("run_id", pa.string()), ("device_id", pa.int32()), ("activity_id", pa.int64()),
                        ("kind", pa.string()), ("activity", pa.string()), ("global_pid", pa.int64()),
                        ("stream_id", pa.int64()), ("correlation_id", pa.int64()), ("start_ns", pa.int64()),
                        ("end_ns", pa.int64()), ("launch_ns", pa.int64()), ("launch_tid", pa.int64()),
                        ("nvtx", pa.string()), ("nvtx_start_ns", pa.int64()), ("group_id", pa.int64()),
                        ("t0_ns", pa.float64()), ("work_ns", pa.int64()), ("late_activity_id", pa.int64()),
                        ("collective", pa.string())])
    return paths._Run(pa.Table.from_pylist(rows, schema=schema), w, {1: SM}, calls)


def _reach(run: paths._Run, dev: int = 0) -> float:
    row = {(r["device_id"], r["nvtx"]): r for r in run.rows("r")}[(dev, STEP)]
    return row["reached_sm_ms"] * 1e6, row


def test_a_loss_on_one_busy_stream_reaches_the_step_whole():
    run = _run([dict(stream=1, corr=1, start=0, end=100), dict(stream=1, corr=2, start=100, end=250, loss=40),
                dict(stream=1, corr=3, start=250, end=300)])
    reach, row = _reach(run)
    assert reach == pytest.approx(40) and row["step_ms"] * 1e6 == 300
    assert row["path_compute_ms"] * 1e6 == pytest.approx(300)


def test_slack_on_another_stream_absorbs_the_rest():
    # stream 2 runs on its own until 280: the step cannot end before it, so 20 of the 40 reach
    run = _run([dict(stream=1, corr=1, start=0, end=100, loss=40), dict(stream=1, corr=2, start=100, end=300),
                dict(stream=2, corr=3, start=0, end=280)])
    assert _reach(run)[0] == pytest.approx(20)


def test_a_host_launch_bounds_what_reaches():
    # the last kernel could not start before its launch at 280 (the host's time is fixed): 20 of 40 reach
    run = _run([dict(stream=1, corr=1, start=0, end=100, loss=40), dict(stream=1, corr=2, start=100, end=300),
                dict(stream=1, corr=3, start=300, end=350, launch=280)])
    reach, row = _reach(run)
    assert reach == pytest.approx(20)


def test_an_event_wait_carries_the_loss_to_another_stream():
    # stream 2's kernel waits (cudaStreamWaitEvent, correlation 5) for the event recorded after stream 1's first
    # kernel (correlation 2): it ends the step, and the loss of stream 1's kernel reaches it whole
    run = _run([dict(stream=1, corr=1, start=0, end=200, loss=50), dict(stream=1, corr=3, start=200, end=220),
                dict(stream=2, corr=6, start=200, end=400)],
               waits=[dict(global_pid=0, stream_id=2, correlation_id=5, record_stream_id=1, record_correlation_id=2)])
    reach, row = _reach(run)
    assert reach == pytest.approx(50)
    # ... and without the wait, stream 2's kernel started at its own time: nothing reaches
    run = _run([dict(stream=1, corr=1, start=0, end=200, loss=50), dict(stream=1, corr=3, start=200, end=220),
                dict(stream=2, corr=6, start=200, end=400)])
    assert _reach(run)[0] == pytest.approx(0)


def test_an_event_relayed_through_a_stream_without_work_is_followed():
    # stream 3 only waits for stream 1's event and records its own, which stream 2 waits for
    run = _run([dict(stream=1, corr=1, start=0, end=200, loss=50), dict(stream=2, corr=9, start=200, end=400)],
               waits=[dict(global_pid=0, stream_id=3, correlation_id=4, record_stream_id=1, record_correlation_id=2),
                      dict(global_pid=0, stream_id=2, correlation_id=8, record_stream_id=3, record_correlation_id=6)])
    assert _reach(run)[0] == pytest.approx(50)


def test_a_late_rank_sets_the_others_step():
    # device 1 arrives at its all-reduce at 20 and waits for device 0, which arrives at 100 (after its kernel on the
    # same stream) having lost 50 to SMs taken; the collective's transfer is 10 on both
    acts = [dict(dev=0, stream=1, corr=1, start=0, end=100, loss=50),
            dict(dev=0, stream=1, corr=2, start=100, end=110, kind="comm", coll="c/all_reduce/0", work=10),
            dict(dev=1, stream=1, corr=1, start=0, end=20),
            dict(dev=1, stream=2, corr=2, start=20, end=110, kind="comm", coll="c/all_reduce/0", work=10, late=1)]
    run = _run(acts)
    reach, row = _reach(run, dev=1)
    assert reach == pytest.approx(50)
    assert row["set_by_device_id"] == 0 and row["path_other_devices_ms"] * 1e6 == pytest.approx(100)
    assert row["lost_sm_ms"] == 0  # device 1's own activities lost nothing
    # had it not waited for device 0, its all-reduce would have ended at 20 + 10: its step 80 earlier
    assert row["reached_wait_ms"] * 1e6 == pytest.approx(80)
    # device 0's own step: its loss reaches it whole
    assert _reach(run, dev=0)[0] == pytest.approx(50)


def test_nothing_reaches_without_a_loss():
    run = _run([dict(stream=1, corr=1, start=0, end=100), dict(stream=1, corr=2, start=100, end=200)])
    reach, row = _reach(run)
    assert reach == 0 and row["lost_all_ms"] == 0


DATA = Path(__file__).parent / "data" / "h200x2_paths"
SLOW, CLEAN = (1, 3), (0, 2, 4, 5)


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    return by_step(tmp_path_factory.mktemp("paths") / "run", DATA, "critical_path", SLOW)


def test_expected_1_the_other_ranks_path_ran_on_the_slow_one(steps):
    _, s = steps
    for k in SLOW:
        assert s[(1, k)]["path_other_devices_ms"] >= 50 and s[(1, k)]["set_by_device_id"] == 0


def test_expected_2_more_so_than_in_clean_steps(steps):
    _, s = steps
    other = {k: s[(1, k)]["path_other_devices_ms"] for k in (*SLOW, *CLEAN)}
    assert min(other[k] for k in SLOW) > max(other[k] for k in CLEAN)


def test_expected_3_the_slow_ranks_sm_loss_reached_its_step(steps):
    _, s = steps
    for k in SLOW:
        assert s[(0, k)]["reached_sm_ms"] >= 0.5 * s[(0, k)]["lost_sm_ms"]


def test_expected_4_and_the_other_ranks_step(steps):
    _, s = steps
    for k in SLOW:
        assert s[(1, k)]["reached_sm_ms"] >= 40


def test_expected_5_what_reached_is_what_the_step_took_longer(steps):
    _, s = steps
    step0 = statistics.median(s[(0, k)]["step_ms"] for k in CLEAN)
    reached0 = statistics.median(s[(0, k)]["reached_all_ms"] for k in CLEAN)
    for k in SLOW:
        longer = s[(0, k)]["step_ms"] - step0
        assert abs(longer - (s[(0, k)]["reached_all_ms"] - reached0)) <= 0.35 * longer


def test_the_verdicts_say_it(steps):
    doc, _ = steps
    v = {x["device_id"]: x for x in doc["verdicts"]}
    assert v[1]["path_set_by_device_id"] == 0
    assert "critical paths ran on device 0" in v[1]["text"] or "critical path ran on device 0" in v[1]["text"]
    assert v[0]["reached_by_cause_ms"]["sm"] > 0.5 * v[0]["path_lost_by_cause_ms"]["sm"]


def test_without_steps_there_are_no_paths(tmp_path):
    from traceql.attribute import attribute

    doc = attribute(build_store(tmp_path / "run", data=DATA)).to_json()
    assert doc["critical_path"] == [] and doc["verdicts"][0]["step_ms"] is None


def test_the_per_run_executor_gives_the_same_paths(steps, tmp_path):
    from traceql.attribute import attribute

    doc, _ = steps
    store = build_store(tmp_path / "run", data=DATA)
    mapped = attribute(store, group_by_nvtx="case:train*", executor="local", workdir=tmp_path / "w").to_json()
    assert [{k: v for k, v in r.items() if k != "run_id"} for r in mapped["critical_path"]] == \
        [{k: v for k, v in r.items() if k != "run_id"} for r in doc["critical_path"]]
    assert [v["text"] for v in mapped["verdicts"]] == [v["text"] for v in doc["verdicts"]]


# The held-out check: 4 x H200, rank 2 slowed in steps 1 and 3 (tests/data/h200x4_paths/EXPECTED.md, written before
# the trace was collected, after the paths code was committed)
DATA4, SLOW_DEVICE, OTHERS = Path(__file__).parent / "data" / "h200x4_paths", 2, (0, 1, 3)


@pytest.fixture(scope="module")
def steps4(tmp_path_factory):
    return by_step(tmp_path_factory.mktemp("paths4") / "run", DATA4, "critical_path", SLOW)


def test_four_ranks_1_the_others_paths_ran_on_the_slow_rank(steps4):
    _, s = steps4
    for d in OTHERS:
        for k in SLOW:
            assert s[(d, k)]["path_other_devices_ms"] >= 50 and s[(d, k)]["set_by_device_id"] == SLOW_DEVICE, (d, k)


def test_four_ranks_2_more_so_than_in_clean_steps(steps4):
    _, s = steps4
    for d in OTHERS:
        other = {k: s[(d, k)]["path_other_devices_ms"] for k in (*SLOW, *CLEAN)}
        assert min(other[k] for k in SLOW) > max(other[k] for k in CLEAN), (d, other)


def test_four_ranks_3_the_slow_ranks_sm_loss_reached_its_steps(steps4):
    _, s = steps4
    for k in SLOW:
        assert s[(SLOW_DEVICE, k)]["reached_sm_ms"] >= 0.5 * s[(SLOW_DEVICE, k)]["lost_sm_ms"]


def test_four_ranks_4_and_the_others_steps(steps4):
    _, s = steps4
    for d in OTHERS:
        for k in SLOW:
            assert s[(d, k)]["reached_sm_ms"] >= 40, (d, k)


def test_four_ranks_5_what_reached_is_what_the_step_took_longer(steps4):
    _, s = steps4
    step0 = statistics.median(s[(SLOW_DEVICE, k)]["step_ms"] for k in CLEAN)
    reached0 = statistics.median(s[(SLOW_DEVICE, k)]["reached_all_ms"] for k in CLEAN)
    for k in SLOW:
        longer = s[(SLOW_DEVICE, k)]["step_ms"] - step0
        assert abs(longer - (s[(SLOW_DEVICE, k)]["reached_all_ms"] - reached0)) <= 0.35 * longer


@pytest.mark.xfail(strict=True, reason="expectation 6 missed: in clean step 2, device 0's critical path ran on "
                   "device 2's work for 497 of 578 ms (device 2 arrived last at the step's final all-reduce, and a "
                   "path that jumps to a rank follows that rank's step back). Kept as written "
                   "(tests/data/h200x4_paths/README.md)")
def test_four_ranks_6_the_slow_rank_sets_little_of_the_others_clean_steps(steps4):
    _, s = steps4
    for d in OTHERS:
        for k in CLEAN:
            r = s[(d, k)]
            on_slow = r["path_other_devices_ms"] if r["set_by_device_id"] == SLOW_DEVICE else 0.0
            assert on_slow < 0.25 * r["step_ms"], (d, k, on_slow)


def test_four_ranks_waiting_cost_the_others_only_in_the_slowed_steps(steps4):
    """A regression check written after the figures were seen (not one of EXPECTED.md's expectations): what waiting
    for other ranks cost the others' steps (reached_wait_ms) is 39-111 ms in the slowed steps and at most 0.5 ms in
    the clean ones, device 0's step 2 included, whose path ran on device 2."""
    _, s = steps4
    for d in OTHERS:
        assert min(s[(d, k)]["reached_wait_ms"] for k in SLOW) > 30, d
        assert max(s[(d, k)]["reached_wait_ms"] for k in CLEAN) < 1, d
    assert all(s[(SLOW_DEVICE, k)]["reached_wait_ms"] < 1 for k in (*SLOW, *CLEAN))


def test_the_table_lists_the_steps_most_reached_first(tmp_path):
    from traceql.attribute import attribute
    from traceql.render import render_attribution

    result = attribute(build_store(tmp_path / "run", data=DATA), group_by_nvtx="case:train*")
    text = render_attribution(result, "table", limit=2)
    assert "steps' critical paths" in text
    section = text.split("steps' critical paths")[1].split("activities by signature")[0]
    # the two rows shown are slowed steps (slow=1): device 1's, which device 0's loss and the waits for it reached
    rows = [line for line in section.splitlines() if line.strip().startswith("train_ddp")]
    assert len(rows) == 2 and all(line.split()[1] == "1" and "dev 0" in line for line in rows)
    flat = "".join(section.split())
    assert flat.count("slow=1") == 2 and "slow=0" not in flat
