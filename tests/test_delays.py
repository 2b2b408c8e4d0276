"""Kernels held back from starting (activity_delays, the JSON's ``delays``), on a real two-GPU trace recorded with CUDA
event tracing (tests/data/h100x2_held/README.md), and on one recorded without it (a DDP training run, nsys 2025.3
under traceql collect before it asked for event tracing: its event tables are empty).

Expected before the trace was analysed (collectors/eval_held.py): on rank 0 (device 0), each of the 20 all-reduces of
``case:allreduce_held_back`` launched right after ``hold_spin`` took every SM for 20 ms (an NCCL CTA cannot be placed
beside a ``hold_spin`` CTA), with nothing it depended on pending: 20 delays of a little under 20 ms (the spin began
before the all-reduce's launch returned), cause ``sms_held``, held by ``hold_spin``. On rank 1 (device 1), none: its
all-reduces start at once and wait inside the kernel for rank 0 (a wait for another rank, in ``waits``). The
all-reduces of ``case:allreduce_alone`` are held back nowhere.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from h200x2 import build_store
from synthetic import launches, make_store

from traceql.attribute import attribute

DATA = Path(__file__).parent / "data"
HELD = DATA / "h100x2_held" / "held_back.sqlite.xz"


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    return attribute(HELD, group_by_nvtx="case:*", workdir=tmp_path_factory.mktemp("held")).to_json()


def test_the_held_back_allreduces_are_found_and_nothing_else(held):
    rows = held["delays"]
    assert {r["device_id"] for r in rows} == {0}
    assert all(r["nvtx"].startswith("case:allreduce_held_back;") for r in rows)
    assert all(r["name"].startswith("ncclDevKernel_AllReduce") and r["activity"] == "kernel" for r in rows)
    assert sum(r["n"] for r in rows) == 20
    assert all((r["cause"], r["held_by"]) == ("sms_held", "hold_spin") for r in rows)
    per_launch = [r["delay_ms"] / r["n"] for r in rows]
    assert all(18.0 < d <= 20.0 for d in per_launch), per_launch


def test_the_verdict_says_it_and_the_waiting_rank_waits(held):
    by_device = {v["device_id"]: v for v in held["verdicts"]}
    v0, v1 = by_device[0], by_device[1]
    assert v0["held_back_n"] == 20 and v0["held_back_by"] == "hold_spin"
    assert v0["held_back_ms"] == pytest.approx(sum(r["delay_ms"] for r in held["delays"]))
    assert "20 kernel launches were held back from starting" in v0["text"] and "until hold_spin released" in v0["text"]
    # rank 1 is not held back: it waits inside its all-reduces for rank 0, which the waits say
    assert v1["held_back_ms"] is None and "held back" not in v1["text"]
    assert v1["late_device_id"] == 0 and v1["wait_ms"] > 20 * 18.0
    assert not any("without CUDA event tracing" in n for n in held["notes"])


def test_without_event_tracing_no_delay_is_claimed_where_a_wait_may_apply_and_a_note_says_why(tmp_path):
    """DDP without event records: its compute kernels run on the legacy NULL stream (which waits for the blocking
    streams' work unseen), and before each collective PyTorch makes the NCCL stream wait (cudaStreamWaitEvent,
    recorded; which stream it made wait is not): no kernel can be judged, and none is claimed."""
    doc = attribute(DATA / "h200x2" / "train_ddp.sqlite.xz", group_by_nvtx="case:train*", workdir=tmp_path).to_json()
    assert doc["delays"] == []
    [note] = [n for n in doc["notes"] if "without CUDA event tracing" in n]
    assert "--cuda-event-trace=true" in note and "lower bound" in note
    assert all(v["held_back_ms"] is None for v in doc["verdicts"])


RESIDENCY = DATA / "calibration" / "residency" / "residency_nvidia_h200.sqlite.xz"


def test_without_event_tracing_a_kernel_on_a_non_blocking_stream_is_judged(tmp_path):
    """tests/data/calibration/residency (no event records, no stream wait called): each of the eight victims launched
    beside a co-runner that keeps every SM's threads taken waited for the rest of it, then ran as fast as alone. Each
    first launch is held back by nearly the whole co-runner (it was launched just after it), held by it; the victims'
    later launches, queued behind the first on their stream, are not (stream order)."""
    con = duckdb.connect()
    doc = attribute(RESIDENCY, group_by_nvtx="case:*", workdir=tmp_path, con=con).to_json()
    rows = doc["delays"]
    assert len(rows) == 8 and all(r["n"] == 1 and r["name"] == "chase" for r in rows)
    assert {r["held_by"] for r in rows} == {"fill_sleep", "fill_sleep512"}
    assert all(r["cause"] == "sms_held" and r["nvtx"].startswith("case:chase_fill;") for r in rows)
    fills = dict(con.sql("SELECT nvtx, dur_ns / 1e6 FROM instance_facts WHERE short_name LIKE 'fill_sleep%'")
                 .fetchall())
    for r in rows:
        assert 0.99 < r["delay_ms"] / fills[r["nvtx"]] <= 1.0, (r["nvtx"], r["delay_ms"])
    [v] = doc["verdicts"]
    assert v["held_back_n"] == 8 and "8 kernel launches were held back from starting" in v["text"]


def test_without_event_tracing_only_non_blocking_streams_are_judged(tmp_path):
    """FSDP2 without event records (tests/data/h200x2/train_fsdp2): the kernels held back are on non-blocking
    streams, none on the NULL stream (its kernels wait for other streams' work unseen), and no stream wait was called
    in their process between the work before each on its stream and its launch."""
    con = duckdb.connect()
    attribute(build_store(tmp_path / "fsdp2", ["train_fsdp2"]), group_by_nvtx="case:train*", con=con)
    kinds = con.sql("""SELECT DISTINCT s.stream_kind
                       FROM activity_delays d JOIN _activity_rows a USING (run_id, activity_id)
                       JOIN streams s ON s.run_id = a.run_id AND s.global_pid = a.global_pid
                        AND s.stream_id = a.stream_id""").fetchall()
    assert kinds == [("non_blocking",)]
    waited = con.sql("""
        WITH ordered AS (
            SELECT run_id, activity_id, global_pid, correlation_id,
                   lag(correlation_id) OVER (PARTITION BY run_id, global_pid, stream_id ORDER BY correlation_id) AS pred
            FROM _activity_rows)
        SELECT count(*) FROM activity_delays d JOIN ordered o USING (run_id, activity_id)
        JOIN runtime_api w ON w.run_id = o.run_id AND w.global_pid = o.global_pid AND w.name ILIKE '%StreamWait%'
         AND w.correlation_id < o.correlation_id AND w.correlation_id > coalesce(o.pred, -1)""").fetchall()[0][0]
    assert waited == 0
    assert con.sql("SELECT count(*), count(*) FILTER (cause = 'sms_held') FROM activity_delays").fetchall()[0] \
        == (con.sql("SELECT count(*) FROM activity_delays").fetchall()[0][0],) * 2


def test_allreduces_queued_behind_gemms_are_held_by_them(tmp_path):
    """Found after the rule was written (not an expectation fixed before): in ``allreduce_then_gemm`` of a two-GPU
    evaluation trace, whose nsys (2025.3, its default ``--cuda-event-trace=auto``) recorded the event waits, each
    all-reduce queued behind back-to-back cuBLAS GEMMs starts about 0.6 ms after the one before it ended, while the
    GEMMs' CTAs (more than half an SM each, like NCCL's) hold every SM: ``sms_held``, by the GEMM, on both ranks."""
    doc = attribute(DATA / "eval" / "h100x2" / "eval_comm_3.sqlite.xz", group_by_nvtx="case:*",
                    workdir=tmp_path).to_json()
    rows = doc["delays"]
    assert {r["device_id"] for r in rows} == {0, 1}
    assert all(r["nvtx"].startswith("case:allreduce_then_gemm;") and r["cause"] == "sms_held"
               and r["held_by"].startswith("nvjet_") for r in rows)
    assert all(0.3 < r["delay_ms"] / r["n"] < 1.0 for r in rows)


def _held_store(tmp_path: Path, kind: str | None, wait_call: bool = False, launch: str = "cudaLaunchKernel"):
    """A kernel on stream 21 launched at 1 us, ready then (nothing before it on its stream), starting as a kernel
    that took the SMs from 0 to 1 ms ends: a delay of about 1 ms, if it may be judged. ``kind``: stream 21's kind
    in ``streams`` (None: no row); ``wait_call``: the process called cudaStreamWaitEvent before its launch."""
    kernels = [dict(name="hog", start_ns=0, end_ns=1_000_000, ctas=132, stream_id=20, correlation_id=10),
               dict(name="late", start_ns=1_000_010, end_ns=1_100_000, ctas=132, stream_id=21, correlation_id=30)]
    api = launches(kernels[:1], lead_ns=-1) + [dict(global_pid=1, correlation_id=30, start_ns=1_000, end_ns=1_005,
                                                    name=launch)]
    if wait_call:
        api.append(dict(global_pid=1, correlation_id=20, start_ns=500, end_ns=505, name="cudaStreamWaitEvent_v3020"))
    streams = [dict(global_pid=1, context_id=1, stream_id=20, stream_kind="non_blocking", priority=0)]
    if kind is not None:
        streams.append(dict(global_pid=1, context_id=1, stream_id=21, stream_kind=kind, priority=0))
    return make_store(tmp_path / "store", kernels=kernels, runtime_api=api, streams=streams)


@pytest.mark.parametrize(("kind", "wait_call", "launch", "judged"), [
    ("non_blocking", False, "cudaLaunchKernel", True),
    ("blocking", False, "cudaLaunchKernel", False),  # waits for the NULL stream's work, unseen
    ("null", False, "cudaLaunchKernel", False),  # waits for every blocking stream's work, unseen
    (None, False, "cudaLaunchKernel", False),  # a store without the streams' kinds (ingested before them)
    ("non_blocking", True, "cudaLaunchKernel", False),  # a stream wait was called: it may have been this stream's
    ("non_blocking", False, "cudaGraphLaunch_v10000", False),  # a graph orders its kernels by its own edges
])
def test_without_event_tracing_what_may_be_judged(tmp_path, kind, wait_call, launch, judged):
    doc = attribute(_held_store(tmp_path, kind, wait_call, launch)).to_json()
    if not judged:
        assert doc["delays"] == []
        return
    [row] = doc["delays"]
    assert (row["name"], row["n"], row["cause"], row["held_by"]) == ("late", 1, "sms_held", "hog")
    assert row["delay_ms"] == pytest.approx((1_000_010 - 1_005) / 1e6)
