"""`traceql export --perfetto`: the trace is read back with the protobuf definitions Perfetto publishes (the
``perfetto`` package's ``perfetto_trace_pb2``), its begin and end events paired per track as Perfetto's trace
processor pairs them (sorted by time, ties in file order), and compared with the run store: slices per GPU stream,
their count and summed duration, kernel names byte for byte, NVTX ranges per thread, GPU-metric samples, traceql's
findings on the right slices, waits as flows to the late rank's collective, launches as flows to their activity.
Where a ``trace_processor_shell`` can be had offline (``TRACEQL_TRACE_PROCESSOR`` or on PATH), Perfetto's own trace
processor counts the same slices."""

from __future__ import annotations

import collections
import os
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import DATA, run_cli
from h200x2 import build_store

import traceql
from traceql.attribute import attribute
from traceql.perfetto import export_perfetto

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the perfetto package (pip install '.[dev]') has Perfetto's published protos")

STRAGGLER = DATA / "h200x2_training"


# -- reading a trace back ---------------------------------------------------------------------------------------------

class Trace:
    """A Perfetto trace decoded with the published protos: tracks, slices (paired per track), counters, flows."""

    def __init__(self, path: Path):
        trace = pb.Trace()
        trace.ParseFromString(path.read_bytes())
        interned = {"names": {}, "args": {}, "strings": {}, "categories": {}}
        self.tracks: dict[int, object] = {}
        events = []
        cleared = False
        for i, p in enumerate(trace.packet):
            assert p.trusted_packet_sequence_id == 1
            if p.sequence_flags & 1:
                cleared = True
            if p.HasField("interned_data"):
                assert cleared, "interned data before the sequence's state was cleared"
                d = p.interned_data
                for table, entries in (("names", d.event_names), ("args", d.debug_annotation_names),
                                       ("categories", d.event_categories)):
                    for e in entries:
                        assert e.iid not in interned[table], "an iid interned twice"
                        interned[table][e.iid] = e.name
                for e in d.debug_annotation_string_values:
                    interned["strings"][e.iid] = e.str.decode()
            if p.HasField("track_descriptor"):
                t = p.track_descriptor
                assert t.uuid not in self.tracks
                self.tracks[t.uuid] = t
            if p.HasField("track_event"):
                e = p.track_event
                assert e.track_uuid in self.tracks, "an event before its track's descriptor"
                args = {}
                for a in e.debug_annotations:
                    which = a.WhichOneof("value")
                    args[interned["args"][a.name_iid]] = (interned["strings"][a.string_value_iid]
                                                          if which == "string_value_iid" else getattr(a, which))
                events.append((p.timestamp, i, e.type, e.track_uuid,
                               interned["names"].get(e.name_iid) if e.HasField("name_iid") else None,
                               [interned["categories"][c] for c in e.category_iids], args, list(e.flow_ids),
                               list(e.terminating_flow_ids), e.double_counter_value))
        events.sort(key=lambda x: (x[0], x[1]))  # the trace processor's order: time, then file order
        stacks: dict[int, list[dict]] = collections.defaultdict(list)
        self.slices: list[dict] = []
        self.counters: dict[int, list[tuple[int, float]]] = collections.defaultdict(list)
        for ts, _, kind, track, name, cats, args, flows, ends, value in events:
            if kind == 1:
                s = {"track": track, "name": name, "ts": ts, "dur": None, "category": cats[0] if cats else None,
                     "args": args, "flows": flows, "ends_flows": ends, "depth": len(stacks[track])}
                stacks[track].append(s)
                self.slices.append(s)
            elif kind == 2:
                s = stacks[track].pop()
                s["dur"] = ts - s["ts"]
            elif kind == 3:
                self.slices.append({"track": track, "name": name, "ts": ts, "dur": 0, "category": cats[0],
                                    "args": args, "flows": [], "ends_flows": [], "depth": len(stacks[track])})
            elif kind == 4:
                self.counters[track].append((ts, value))
        self.unclosed = sum(len(v) for v in stacks.values())
        starts = {f: s for s in self.slices for f in s["flows"]}
        self.flows = [(starts[f], s) for s in self.slices for f in s["ends_flows"] if f in starts]
        self.dangling = [f for s in self.slices for f in s["ends_flows"] if f not in starts]

    def name(self, uuid: int) -> str:
        t = self.tracks[uuid]
        return t.name or t.thread.thread_name or t.process.process_name

    def gpu(self, uuid: int) -> int | None:
        """The GPU a track belongs to (its process is named 'GPU N...')."""
        t = self.tracks[uuid]
        while not t.HasField("process") and t.HasField("parent_uuid"):
            t = self.tracks[t.parent_uuid]
        name = t.process.process_name if t.HasField("process") else ""
        return int(name.split()[1].rstrip(":")) if name.startswith("GPU ") else None


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("perfetto") / "run", data=STRAGGLER)


@pytest.fixture(scope="module")
def exported(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("perfetto_out") / "straggler.pftrace"
    summary = export_perfetto(store, out)
    return summary, Trace(out)


@pytest.fixture(scope="module")
def con(store):
    con = traceql.connect(store)
    yield con
    con.close()


def _stream(trace: Trace, s: dict) -> tuple[int, int]:
    """(device, stream) of a GPU slice, from its track."""
    name = trace.name(s["track"]).split()
    return trace.gpu(s["track"]), int(name[1])


# -- the tests --------------------------------------------------------------------------------------------------------

def test_every_begin_has_its_end(exported):
    summary, trace = exported
    assert trace.unclosed == 0 and all(s["dur"] is not None and s["dur"] >= 0 for s in trace.slices)
    assert not trace.dangling
    assert summary.bytes == summary.path.stat().st_size


def test_slices_per_stream_equal_the_store(exported, con):
    _, trace = exported
    got = collections.defaultdict(lambda: [0, 0])
    for s in trace.slices:
        if s["category"] in ("kernel", "memcpy", "memset"):
            device, stream = _stream(trace, s)
            got[(s["category"], device, stream)][0] += 1
            got[(s["category"], device, stream)][1] += s["dur"]
    want = {(table, d, st): [n, total] for table in ("kernel", "memcpy", "memset") for d, st, n, total in con.sql(
        f"SELECT device_id, stream_id, count(*), sum(dur_ns) FROM {table if table != 'kernel' else 'kernels'} "
        "GROUP BY ALL").fetchall()}
    assert dict(got) == want
    assert sum(v[0] for k, v in want.items() if k[0] == "kernel") == 38829


def test_slices_are_the_stores_activities_one_by_one(exported, con):
    """Each kernel is a slice on its device's stream with its exact start, end and name (C++ templates as they
    are)."""
    _, trace = exported
    got = sorted((*_stream(trace, s), s["ts"], s["ts"] + s["dur"], s["name"]) for s in trace.slices
                 if s["category"] == "kernel")
    want = sorted(con.sql("SELECT device_id, stream_id, start_ns, end_ns, name FROM kernels").fetchall())
    assert got == want
    assert any("<" in name and "::" in name for *_, name in got)


def test_nvtx_ranges_per_thread_equal_the_store(exported, con):
    _, trace = exported
    got = collections.Counter()
    for s in trace.slices:
        if s["category"] == "nvtx":
            got[(trace.name(s["track"]), s["name"], s["dur"], s["depth"], s["args"].get("domain"))] += 1
    want = collections.Counter({(f"thread {tid}", text, dur, depth, domain): n for tid, text, dur, depth, domain, n
                                in con.sql("SELECT tid, text, dur_ns, depth, domain, count(*) FROM nvtx "
                                           "GROUP BY ALL").fetchall()})
    assert got == want and sum(want.values()) == 805


def test_cuda_api_calls_and_launch_flows(exported, con):
    _, trace = exported
    api = [s for s in trace.slices if s["category"] == "cuda_api"]
    assert len(api) == con.sql("SELECT count(*) FROM runtime_api").fetchall()[0][0]
    assert sum(s["dur"] for s in api) == con.sql("SELECT sum(dur_ns) FROM runtime_api").fetchall()[0][0]
    launches = [(a, b) for a, b in trace.flows if a["category"] == "cuda_api"]
    assert len(launches) == 38829 + 4172 + 3207  # every kernel, copy and set of this trace has its launch call
    for call, activity in launches:
        assert activity["category"] in ("kernel", "memcpy", "memset")
        assert call["args"]["correlation_id"] == activity["args"]["correlation_id"]
        assert call["ts"] <= activity["ts"]


def test_gpu_metrics_are_counter_tracks(exported, con):
    _, trace = exported
    columns = [c for c, t, *_ in con.sql("DESCRIBE gpu_metrics_wide").fetchall() if t == "DOUBLE"]
    checked = 0
    for uuid, samples in trace.counters.items():
        name = trace.name(uuid)
        if name not in columns:
            continue
        n, total = con.sql(f'SELECT count("{name}"), sum("{name}") FROM gpu_metrics_wide WHERE device_id = ?',
                           params=[trace.gpu(uuid)]).fetchall()[0]
        assert len(samples) == n and sum(v for _, v in samples) == pytest.approx(total)
        assert [t for t, _ in samples] == sorted(t for t, _ in samples)
        checked += 1
    expected = sum(1 for c in columns for d in (0, 1) if con.sql(
        f'SELECT count("{c}") FROM gpu_metrics_wide WHERE device_id = {d}').fetchall()[0][0])
    assert checked == expected > 0
    nvml = [u for u in trace.counters if trace.name(u) == "NVML power_w"]
    assert len(nvml) == 2


def test_findings_are_on_the_right_slices(exported, store):
    """Each attributed row of `traceql attribute` is found on exactly its overlapped instances: as many slices,
    the same summed duration, its class, and per-instance slowdowns whose median is the row's."""
    _, trace = exported
    rows = [r for r in attribute(store).to_json()["kernels"]
            if r["nvtx"] is None and r["t0_ns"] is not None and not r["conflated"] and r["n_overlapped"]]
    assert any(r["class"] == "sm" for r in rows)
    by_row = collections.defaultdict(list)
    for s in trace.slices:
        a = s["args"]
        if "traceql.class" in a:
            by_row[(trace.gpu(s["track"]), s["name"], a["traceql.class"], a["traceql.row.slowdown"])].append(s)
    checked = 0
    for r in rows:
        found = by_row.get((r["device_id"], r["name"], r["class"], r["slowdown"]))
        assert found is not None, (r["name"], r["class"])
        assert len(found) == r["n_overlapped"] and sum(s["dur"] for s in found) == r["sum_t1_ns"]
        assert all(s["args"]["traceql.overlap_ns"] > 0 for s in found)
        if r["baseline"] == "isolated":  # one t0 for the row: its slowdown is the median instance's
            assert statistics.median(s["args"]["traceql.slowdown"] for s in found) == pytest.approx(r["slowdown"])
        checked += 1
    assert checked == len(rows) > 20
    parts = [s["args"] for s in trace.slices if "traceql.predicted" in s["args"]]
    assert parts
    for a in parts:  # the parts add up to the prediction
        assert sum(a[f"traceql.predicted.{f}"] for f in ("sm", "dram_bw", "cache", "clock", "link")) == \
            pytest.approx(a["traceql.predicted"], abs=1e-9)


def test_isolated_instances_carry_no_class(exported):
    _, trace = exported
    gpu = [s for s in trace.slices if s["category"] in ("kernel", "memcpy", "memset")]
    assert all("traceql.class" not in s["args"] for s in gpu if s["args"]["traceql.overlap_ns"] == 0)
    assert any("traceql.slowdown" in s["args"] for s in gpu if s["args"]["traceql.overlap_ns"] == 0)


def test_waits_are_flows_to_the_late_ranks_collective(exported, con, store):
    _, trace = exported
    waits = [(a, b) for a, b in trace.flows if a["category"] == "traceql"]
    attribute(store, con=con)
    want = con.sql("SELECT device_id, late_device_id, start_ns, wait_ns, last_arrival_ns FROM collective_waits "
                   "WHERE wait_ns > 0 AND late_device_id <> device_id ORDER BY start_ns").fetchall()
    assert len(waits) == len(want) > 0
    for (wait, late), (device, late_device, start, wait_ns, last) in zip(
            sorted(waits, key=lambda x: x[0]["ts"]), want, strict=True):
        assert trace.name(wait["track"]) == "traceql: waits for other ranks"
        assert (trace.gpu(wait["track"]), wait["ts"], wait["dur"]) == (device, start, wait_ns)
        assert wait["args"]["traceql.late_device_id"] == late_device
        assert late["category"] == "kernel" and trace.gpu(late["track"]) == late_device
        assert late["ts"] == last == wait["ts"] + wait["dur"]  # the wait ends when the late rank arrives
        assert late["args"]["kind"] == "comm"
    per_device = collections.Counter()
    for wait, _ in waits:
        per_device[trace.gpu(wait["track"])] += wait["dur"]
    for device, wait_ms in con.sql("SELECT device_id, wait_ms FROM rank_waits WHERE nvtx IS NULL").fetchall():
        assert per_device[device] / 1e6 == pytest.approx(wait_ms)
    assert per_device[1] > 10 * per_device[0]  # rank 1 waited for the straggler, rank 0


def test_verdict_and_overlap_tracks(exported, store):
    _, trace = exported
    verdicts = [s for s in trace.slices if s["name"] == "verdict"]
    doc = {v["device_id"]: v for v in attribute(store).to_json()["verdicts"]}
    assert sorted(trace.gpu(s["track"]) for s in verdicts) == [0, 1]
    for s in verdicts:
        assert s["args"]["traceql.text"] == doc[trace.gpu(s["track"])]["text"]
    states = {s["name"] for s in trace.slices if trace.name(s["track"]) == "traceql: overlap"}
    assert states == {"compute", "comm", "overlap"}


def test_raw_export_through_the_cli(tmp_path):
    """A raw nsys export (with GPU metrics) is taken as `attribute` takes it; the output path is printed."""
    trace = DATA / "h100" / "known_cause.sqlite.xz"
    out = tmp_path / "kc.pftrace"
    rc, stdout, stderr = run_cli("export", trace, "--perfetto", out, "--no-api", timeout=600)
    assert rc == 0, stderr
    assert stdout.strip() == str(out) and "kernels" in stderr
    t = Trace(out)
    con = traceql.connect(_ingest(trace, tmp_path))
    n, total = con.sql("SELECT count(*), sum(dur_ns) FROM kernels").fetchall()[0]
    kernels = [s for s in t.slices if s["category"] == "kernel"]
    assert (len(kernels), sum(s["dur"] for s in kernels)) == (n, total)
    assert not [s for s in t.slices if s["category"] == "cuda_api"] and t.counters


def _ingest(trace: Path, tmp: Path) -> Path:
    traceql.ingest(trace, tmp / "store")
    return tmp / "store"


def test_cli_refuses_bad_input_and_its_own_input(tmp_path, store):
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a trace")
    rc, _, err = run_cli("export", bad, "--perfetto", tmp_path / "x.pftrace")
    assert rc == 2 and "Traceback" not in err and not (tmp_path / "x.pftrace").exists()
    rc, _, err = run_cli("export", store, "--perfetto", store / "manifest.json")
    assert rc == 2 and "never writes over what it reads" in err and "Traceback" not in err
    rc, _, err = run_cli("export", store)
    assert rc == 2 and "--perfetto" in err
    rc, _, err = run_cli("export", tmp_path / "missing", "--perfetto", tmp_path / "y.pftrace")
    assert rc == 2 and "Traceback" not in err


def _trace_processor() -> str | None:
    return os.environ.get("TRACEQL_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")


@pytest.mark.skipif(_trace_processor() is None, reason="no trace_processor_shell offline (set TRACEQL_TRACE_PROCESSOR "
                                                       "to one): the trace is checked with the published protos")
def test_perfettos_trace_processor_reads_the_same(exported, con):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    summary, _ = exported
    tp = TraceProcessor(trace=str(summary.path), config=TraceProcessorConfig(bin_path=_trace_processor()))
    try:
        got = {(r.cat, r.n, r.total) for r in tp.query(
            "SELECT category AS cat, count(*) AS n, sum(dur) AS total FROM slice "
            "WHERE category IN ('kernel', 'memcpy', 'memset') GROUP BY 1")}
        want = {(t, n, total) for t, n, total in con.sql(
            "SELECT 'kernel', count(*), sum(dur_ns) FROM kernels UNION ALL SELECT 'memcpy', count(*), sum(dur_ns) "
            "FROM memcpy UNION ALL SELECT 'memset', count(*), sum(dur_ns) FROM memset").fetchall()}
        assert got == want
        flows = next(iter(tp.query("SELECT count(*) AS n FROM flow"))).n
        assert flows == summary.flows["launch"] + summary.flows["wait"]
    finally:
        tp.close()


def test_several_runs_side_by_side(tmp_path):
    """A store of two runs: each GPU is named with its run, and holds that run's activities only."""
    runs = tmp_path / "store"
    traceql.ingest([DATA / "h100" / "known_cause.sqlite.xz", STRAGGLER / "nccl_payload.sqlite.xz"], runs)
    summary = export_perfetto(runs, tmp_path / "two.pftrace", api=False)
    trace = Trace(summary.path)
    con = traceql.connect(runs)
    want = collections.Counter({(r, d): n for r, d, n in con.sql(
        "SELECT run_id, device_id, count(*) FROM kernels GROUP BY ALL").fetchall()})
    assert len({r for r, _ in want}) == 2 and summary.runs == 2
    got = collections.Counter()
    for s in trace.slices:
        if s["category"] == "kernel":
            t = trace.tracks[s["track"]]
            process = trace.tracks[t.parent_uuid].process.process_name
            got[(process.split("(run ")[1].rstrip(")"), trace.gpu(s["track"]))] += 1
    assert got == want
    pids = [t.process.pid for t in trace.tracks.values() if t.HasField("process")]
    assert len(pids) == len(set(pids))


def test_overlaps_nesting_and_ties_on_one_track(tmp_path):
    """What Perfetto cannot draw on one track goes to a second one, and begins and ends at one time pair as they
    should: kernels of one stream that overlap, ranges nested with equal ends and starts, zero-length ranges, a
    start/end range crossing another, API calls nested in API calls."""
    from synthetic import make_store

    kernels = [dict(start_ns=1000, end_ns=2000, name="a<int, 2>"), dict(start_ns=1500, end_ns=2500, name="b"),
               dict(start_ns=2500, end_ns=3000, name="c"), dict(start_ns=2500, end_ns=2500, name="z"),
               dict(start_ns=5000, end_ns=6000, name="d"), dict(start_ns=3000, end_ns=4000, name="alone")]
    nvtx = [dict(start_ns=0, end_ns=10_000, text="outer", depth=0),
            dict(start_ns=0, end_ns=5000, text="inner", depth=1),
            dict(start_ns=5000, end_ns=10_000, text="second", depth=1),
            dict(start_ns=5000, end_ns=5000, text="empty", depth=2),
            dict(start_ns=100, end_ns=200, text="se1", event_type="start_end"),
            dict(start_ns=150, end_ns=300, text="se2", event_type="start_end")]
    api = [dict(start_ns=10, end_ns=90, name="cudaLaunchKernel"), dict(start_ns=20, end_ns=90, name="cuLaunchKernel"),
           dict(start_ns=90, end_ns=95, name="cudaStreamSynchronize")]
    runs = make_store(tmp_path / "store", kernels=kernels, nvtx=nvtx, runtime_api=api)
    trace = Trace(export_perfetto(runs, tmp_path / "t.pftrace").path)
    assert trace.unclosed == 0
    got = {s["name"]: (trace.name(s["track"]), s["ts"], s["dur"], s["depth"]) for s in trace.slices
           if s["category"] in ("kernel", "nvtx", "cuda_api")}
    assert got["a<int, 2>"] == ("stream 7", 1000, 1000, 0)
    assert got["b"] == ("stream 7 (2)", 1500, 1000, 0)  # overlaps a: the stream's second track
    assert got["c"][1:] == (2500, 500, 0) and got["z"][1:] == (2500, 0, 0) and got["d"][1:] == (5000, 1000, 0)
    assert got["alone"] == ("stream 7", 3000, 1000, 0)
    assert got["outer"][1:] == (0, 10_000, 0) and got["inner"][1:] == (0, 5000, 1)
    assert got["second"][1:] == (5000, 5000, 1) and got["empty"][1:] == (5000, 0, 2)
    assert got["se1"][0] == "NVTX start/end ranges" and got["se2"][0] == "NVTX start/end ranges (2)"
    assert got["cudaLaunchKernel"][1:] == (10, 80, 0) and got["cuLaunchKernel"][1:] == (20, 70, 1)
    assert got["cudaStreamSynchronize"][1:] == (90, 5, 0)
