"""Charts for reports: functions from result tables to altair charts, kept apart from the analysis.

Each chart is registered with the query names it needs; it receives those tables (pyarrow, already
tagged with ``run_id`` and the run's display name ``run``) and returns an ``alt.Chart`` or None when there
is nothing to draw. Tests check charts through their spec (``to_dict()``) and in a real browser.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import altair as alt
import pyarrow as pa
import pyarrow.compute as pc

FACTORS = ("sm", "dram_bw", "cache", "clock", "link", "residual")
FACTOR_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#bab0ac")
STATE_COLORS = {"compute": "#4c78a8", "overlap": "#72b7b2", "comm": "#e45756"}
MAX_MARKS = 20_000  # per chart: more marks than this make a page slow to open; the chart says what it left out


@dataclass(frozen=True)
class ChartDef:
    fn: Callable[[dict[str, pa.Table], dict], alt.TopLevelMixin | None]
    needs: tuple[str, ...]
    help: str


CHARTS: dict[str, ChartDef] = {}


def chart(*needs: str, help: str):
    def register(fn):
        CHARTS[fn.__name__] = ChartDef(fn, needs, help)
        return fn
    return register


def table_rows(table: pa.Table, columns: list[str] | None = None, limit: int = MAX_MARKS) -> list[dict]:
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return table.slice(0, limit).to_pylist()


_named: ContextVar[dict[str, list[dict]] | None] = ContextVar("traceql_chart_data", default=None)


def inline_data(rows: list[dict]) -> alt.Data:
    """Inline rows; inside :func:`named_data` a name only, the rows kept aside for the page to embed as they are
    (altair walks and validates inline values row by row: seconds on a report's charts)."""
    return alt.Data(**_data_ref(rows))


def _data_ref(rows: list[dict]) -> dict:
    """A spec's ``data``: the rows themselves, or inside :func:`named_data` a name for them (kept aside)."""
    named = _named.get()
    if named is None:
        return {"values": rows}
    name = f"traceql_rows_{len(named)}"  # not data_N: Vega-Lite names its own data sources so
    named[name] = rows
    return {"name": name}


@contextlib.contextmanager
def named_data() -> Iterator[dict[str, list[dict]]]:
    """Charts built inside refer to their data by name; the dict it yields maps each name to its rows
    (a Vega-Lite spec's ``datasets``). Schema validation of the chart objects is off inside too."""
    named: dict[str, list[dict]] = {}
    token = _named.set(named)
    try:
        with alt.utils.schemapi.debug_mode(False):
            yield named
    finally:
        _named.reset(token)


@dataclass(frozen=True)
class Spec:
    """A finished Vega-Lite spec, for charts whose structure is built once with altair and cached (altair takes
    milliseconds per chart: minutes over the per-run charts of a report of a thousand runs). It has altair's
    ``to_dict``, so pages and tests treat it as a chart."""

    spec: dict

    @staticmethod
    def slot(i: int) -> str:
        return f"traceql_slot_{i}"

    @classmethod
    def filled(cls, skeleton: str, rows: list[list[dict]]) -> Spec:
        """The cached ``skeleton`` (JSON) with the data named ``slot(i)`` replaced by ``rows[i]``."""
        refs = {cls.slot(i): _data_ref(r) for i, r in enumerate(rows)}

        def fill(node):
            if isinstance(node, dict):
                if node.keys() == {"name"} and node["name"] in refs:
                    return refs[node["name"]]
                return {k: fill(v) for k, v in node.items()}
            if isinstance(node, list):
                return [fill(v) for v in node]
            return node

        return cls(fill(json.loads(skeleton)))

    def to_dict(self, validate: bool = False) -> dict:
        del validate  # built by altair, whose specs the tests validate
        return self.spec


def joined(*parts: object) -> str:
    """Parts joined with `` · ``, leaving out the missing ones (None, empty): a memset has no grid, most
    signatures no NVTX range, and a label never reads "None"."""
    return " · ".join(str(p) for p in parts if p is not None and str(p).strip())


def _signature_labels(rows: list[dict], width: int = 60) -> list[str]:
    """One distinct label per kernel signature row: run, GPU, name, grid (same-named kernels differ by launch)."""
    seen: dict[str, int] = {}
    labels = []
    for r in rows:
        name = (r.get("short_name") or r.get("name") or r.get("activity") or "")[:width]
        text = joined(r.get("run") or r.get("run_id"), f"GPU {r['device_id']}", name, r.get("grid"),
                     (r.get("nvtx") or "")[:40])
        seen[text] = seen.get(text, 0) + 1
        labels.append(text if seen[text] == 1 else f"{text} #{seen[text]}")
    return labels


def lost_ns(r: dict) -> float | None:
    """The time a signature lost to its slowdown: its overlapped instances' baseline time x their slowdown (as the
    verdicts count it), or None without a baseline."""
    if r.get("lost_ns") is not None:
        return float(r["lost_ns"])
    if r.get("sum_t0_ns") is None or r.get("slowdown") is None:
        return None
    return float(r["sum_t0_ns"]) * float(r["slowdown"])


def _cut_note(table: pa.Table, limit: int = MAX_MARKS) -> str:
    return f" (first {limit:,} of {table.num_rows:,})" if table.num_rows > limit else ""


@chart("segments", "nvtx", help="per device: compute alone, communication alone, both; NVTX ranges above; "
                                 "drag to pan, scroll to zoom")
def timeline(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    seg = data["segments"]
    if seg.num_rows == 0:
        return None
    starts = [pc.min(seg["start_ns"]).as_py()]
    if data["nvtx"].num_rows:
        starts.append(pc.min(data["nvtx"]["start_ns"]).as_py())
    t0 = min(starts)
    rows = [{"lane": f"GPU {r['device_id']}", "state": r["state"], "start_ms": (r["start_ns"] - t0) / 1e6,
             "end_ms": (r["end_ns"] - t0) / 1e6, "dur_us": r["dur_ns"] / 1e3, "run": r.get("run")}
            for r in table_rows(seg, ["device_id", "state", "start_ns", "end_ns", "dur_ns", "run"])]
    max_depth = int(options.get("nvtx_depth", 1))
    nvtx = [{"lane": f"GPU {r['device_id']} NVTX {r['depth']}", "text": r["text"],
             "start_ms": (r["start_ns"] - t0) / 1e6, "end_ms": (r["end_ns"] - t0) / 1e6, "dur_us": r["dur_ns"] / 1e3}
            for r in table_rows(data["nvtx"], ["device_id", "depth", "text", "start_ns", "end_ns", "dur_ns"],
                           limit=MAX_MARKS // 4)
            if r["device_id"] is not None and r["depth"] <= max_depth]
    lanes = tuple(sorted({r["lane"] for r in rows} | {r["lane"] for r in nvtx}))
    layers = [rows, nvtx] if nvtx else [rows]
    return Spec.filled(_timeline_spec(lanes, len(layers), f"GPU activity{_cut_note(seg)}: drag to pan, scroll to zoom"),
                       layers)


@functools.lru_cache(maxsize=64)
def _timeline_spec(lanes: tuple[str, ...], layers: int, title: str) -> str:
    """The timeline's spec without its rows (JSON, layer i's data named ``Spec.slot(i)``): the same for every run
    with the same lanes, so a report of many runs builds it once."""
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    x = alt.X("start_ms:Q", title="time since first activity (ms)")
    y = alt.Y("lane:N", title=None, sort=list(lanes))
    bars = alt.Chart(alt.Data(name=Spec.slot(0))).mark_bar(height=14).encode(
        x=x, x2="end_ms:Q", y=y,
        color=alt.Color("state:N", title="on the GPU", scale=alt.Scale(domain=list(STATE_COLORS),
                                                                      range=list(STATE_COLORS.values()))),
        tooltip=["lane:N", "state:N", alt.Tooltip("start_ms:Q", format=".3f"), alt.Tooltip("dur_us:Q", format=".1f")],
    )
    charts = [bars]
    if layers > 1:
        charts.append(alt.Chart(alt.Data(name=Spec.slot(1))).mark_bar(height=12, color="#d4d4d4", stroke="#888",
                                                                      strokeWidth=0.5)
                      .encode(x=x, x2="end_ms:Q", y=y,
                              tooltip=["text:N", alt.Tooltip("start_ms:Q", format=".3f"),
                                       alt.Tooltip("dur_us:Q", format=".1f")]))
    chart = alt.layer(*charts).add_params(zoom).properties(width=900, height=max(60, 24 * len(lanes)), title=title)
    with alt.utils.schemapi.debug_mode(False):
        return json.dumps(chart.to_dict(validate=False))


@chart("kernels", help="slowdown of each kernel signature, split into the part each resource explains")
def slowdown_parts(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    # ranked by the time each lost, not by relative slowdown: a sub-µs memset 2.5x as long loses less than a GEMM 8%
    # longer; signatures that lost under a thousandth of the most any lost are left out
    every = table_rows(data["kernels"], limit=MAX_MARKS)
    losses = [lost_ns(r) for r in every]
    if any(x is not None for x in losses):
        most = max((x for x in losses if x is not None), default=0.0)
        ranked = sorted((x, i) for i, x in enumerate(losses) if x is not None and x > 0 and x >= most / 1000)
        every = [every[i] for _, i in reversed(ranked)]
    kernels = every[:int(options.get("top", 20))]
    rows = []
    for r, text in zip(kernels, _signature_labels(kernels), strict=True):
        lost = lost_ns(r)
        for f in FACTORS:
            if r.get(f) is not None:
                rows.append({"kernel": text, "part": f, "value": r[f], "slowdown": r["slowdown"],
                             "class": r["class"], "name": r["name"] or r.get("short_name") or "",
                             "lost_us": None if lost is None else lost / 1e3})
    if not rows:
        return None
    order = list(dict.fromkeys(r["kernel"] for r in rows))
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        y=alt.Y("kernel:N", sort=order, title=None, axis=alt.Axis(labelLimit=420)),
        x=alt.X("sum(value):Q", title="slowdown explained (t1/t0 - 1)", axis=alt.Axis(format="%")),
        color=alt.Color("part:N", scale=alt.Scale(domain=list(FACTORS), range=list(FACTOR_COLORS)), title="cause"),
        order=alt.Order("part:N"),
        tooltip=["name:N", "part:N", alt.Tooltip("value:Q", format="+.1%"), alt.Tooltip("slowdown:Q", format="+.1%"),
                 alt.Tooltip("lost_us:Q", title="time lost (µs)", format=",.1f"), "class:N"],
    ).properties(width=520, title="Slowdown per kernel signature and what explains it, most time lost first")


@chart("kernels", help="overlap fraction against slowdown, one point per kernel signature")
def overlap_vs_slowdown(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    columns = ["run", "run_id", "device_id", "short_name", "name", "overlap_fraction", "slowdown", "class",
               "n_overlapped", "corunner_kind"]
    rows = [r for r in table_rows(data["kernels"], columns)
            if r["overlap_fraction"] is not None and r["slowdown"] is not None]
    if not rows:
        return None
    return alt.Chart(inline_data(rows)).mark_circle(opacity=0.75).encode(
        x=alt.X("overlap_fraction:Q", title="overlap fraction f", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("slowdown:Q", title="slowdown t1/t0 - 1", axis=alt.Axis(format="%")),
        color=alt.Color("class:N", title="class"),
        size=alt.Size("n_overlapped:Q", title="overlapped instances"),
        tooltip=["run:N", "device_id:Q", "name:N", alt.Tooltip("overlap_fraction:Q", format=".2f"),
                 alt.Tooltip("slowdown:Q", format="+.1%"), "class:N", "corunner_kind:N"],
    ).properties(width=520, height=320, title="Overlap fraction against slowdown").interactive()


_METRIC_PAIRS = (("SMs Active (%)", "sm_active_pct"), ("DRAM bandwidth (% of peak)", "dram_pct"),
                 ("GPC clock (MHz)", "gpc_clock_mhz"))


@chart("kernels", help="GPU metrics during overlapped versus isolated instances of each kernel signature")
def metrics_iso_vs_ovl(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows = []
    kernels = table_rows(data["kernels"], limit=int(options.get("top", 12)))
    for r, label in zip(kernels, _signature_labels(kernels, 50), strict=True):
        for title, col in _METRIC_PAIRS:
            for when, suffix in (("isolated", "_iso"), ("overlapped", "_ovl")):
                v = r.get(col + suffix)
                if v is not None:
                    rows.append({"kernel": label, "metric": title, "when": when, "value": v, "name": r["name"]})
    if not rows:
        return None
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        y=alt.Y("when:N", title=None), x=alt.X("value:Q", title=None, stack=None),
        color=alt.Color("when:N", scale=alt.Scale(domain=["isolated", "overlapped"], range=["#9ecae9", "#e45756"])),
        row=alt.Row("kernel:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=400)),
        column=alt.Column("metric:N", title=None),
        tooltip=["name:N", "metric:N", "when:N", alt.Tooltip("value:Q", format=".1f")],
    ).resolve_scale(x="independent").properties(width=200, height=36,
                                                title="GPU metrics: isolated versus overlapped instances")


@chart("summary", help="per device: time computing alone, overlapped, and communication left exposed")
def device_time(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows = []
    for r in table_rows(data["summary"]):
        if r.get("nvtx") is not None or r["compute_ns"] is None:
            continue
        dev = joined(r.get("run") or r["run_id"], f"GPU {r['device_id']}")
        overlap = r["overlap_ns"] or 0
        rows += [{"device": dev, "part": "compute alone", "ms": (r["compute_ns"] - overlap) / 1e6},
                 {"device": dev, "part": "overlapped", "ms": overlap / 1e6},
                 {"device": dev, "part": "exposed communication", "ms": (r["exposed_comm_ns"] or 0) / 1e6}]
    if not rows:
        return None
    parts = ["compute alone", "overlapped", "exposed communication"]
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        y=alt.Y("device:N", title=None, axis=alt.Axis(labelLimit=300)),
        x=alt.X("ms:Q", title="GPU time (ms)"),
        color=alt.Color("part:N", scale=alt.Scale(domain=parts, range=["#4c78a8", "#72b7b2", "#e45756"]), title=None),
        order=alt.Order("part_order:Q"),
        tooltip=["device:N", "part:N", alt.Tooltip("ms:Q", format=".3f")],
    ).transform_calculate(part_order=f"indexof({parts!r}, datum.part)").properties(
        width=520, title="Where GPU time went: compute alone, overlapped, communication exposed")


@chart("modes", help="the microbenchmark's four modes side by side: time per iteration, one panel per collective "
                      "and configuration, each on its own scale")
def microbench(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    modes = ["compute", "comm", "sequential", "overlapped"]
    rows = [dict(r, iter_ms=r["iter_ns"] / 1e6, panel=joined(r["op"], r["dtype"], r.get("run") or r["run_id"]))
            for r in table_rows(data["modes"]) if r["device_id"] is not None and r["iter_ns"] is not None]
    if not rows:
        return None
    panels = sorted({r["panel"] for r in rows})
    # One panel per (collective, configuration), each on its own y scale: the modes are compared within a panel,
    # and a shared scale would flatten the panels of short iterations against the longest one. Panel titles break
    # at the dots instead of running into their neighbours.
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        x=alt.X("mode:N", sort=modes, title=None, axis=alt.Axis(labels=False, ticks=False, domain=False)),
        y=alt.Y("mean(iter_ms):Q", title=None),
        color=alt.Color("mode:N", sort=modes, title="mode",
                        scale=alt.Scale(domain=modes, range=["#4c78a8", "#e45756", "#bab0ac", "#72b7b2"])),
        facet=alt.Facet("panel:N", sort=panels, title=None, columns=int(options.get("columns", 6)),
                        header=alt.Header(labelExpr="split(datum.value, ' · ')", labelLimit=150, labelFontSize=11)),
        tooltip=["op:N", "dtype:N", "mode:N", "max_ctas:N", "run:N",
                 alt.Tooltip("mean(iter_ms):Q", format=".3f", title="ms per iteration")],
    ).resolve_scale(y="independent").properties(
        width=120, height=110,
        title="Microbenchmark modes: time per iteration (ms, mean over GPUs); each panel on its own scale")


@chart("effects", help="per configuration: compute slowdown when overlapped, and the gain of overlapping")
def microbench_effects(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    labelled = [(joined(r["op"], r["dtype"], r.get("run") or r["run_id"]), r) for r in table_rows(data["effects"])]
    return _measure_bars(labelled, ("compute_slowdown", "sequential_over_overlapped"), label="config",
                         tooltip_format="+.1%",
                         title="Compute slowdown when overlapped (Σ compute kernel time vs compute only), and "
                               "how much longer sequential runs than overlapped")


def _measure_bars(labelled: list[tuple[str, dict]], measures: tuple[str, ...], *, label: str, tooltip_format: str,
                  title: str) -> alt.TopLevelMixin | None:
    """Grouped horizontal bars of fractions: one group per label, one bar per measure the row has."""
    rows = [{label: name, "measure": what.replace("_", " "), "value": r[what]}
            for name, r in labelled for what in measures if r.get(what) is not None]
    if not rows:
        return None
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        y=alt.Y(f"{label}:N", title=None, axis=alt.Axis(labelLimit=300)),
        x=alt.X("value:Q", title=None, axis=alt.Axis(format="%")),
        color=alt.Color("measure:N", title=None),
        yOffset="measure:N",
        tooltip=[f"{label}:N", "measure:N", alt.Tooltip("value:Q", format=tooltip_format)],
    ).properties(width=420, title=title)


def _power_samples(table: pa.Table) -> list[dict]:
    """NVML samples for the power and clock charts, in seconds since the first sample."""
    if table.num_rows == 0:
        return []
    t0 = pc.min(table["ts_ns"]).as_py()
    return [{"t_s": (r["ts_ns"] - t0) / 1e9, "power_w": r["power_w"], "gpu": f"GPU {r['device_id']}",
             "sm_clock_mhz": r["sm_clock_mhz"], "limit_w": r["power_limit_w"], "run": r.get("run")}
            for r in table_rows(table, ["ts_ns", "power_w", "device_id", "sm_clock_mhz", "power_limit_w", "run"])]


@chart("power", help="NVML power samples over time, per GPU, against the enforced limit")
def power(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows = _power_samples(data["power"])
    if not rows:
        return None
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    base = alt.Chart(inline_data(rows)).encode(x=alt.X("t_s:Q", title="time since first sample (s)"))
    line = base.mark_line(interpolate="step-after").encode(
        y=alt.Y("power_w:Q", title="power (W)"), color=alt.Color("gpu:N", title=None),
        tooltip=["gpu:N", alt.Tooltip("t_s:Q", format=".3f"), alt.Tooltip("power_w:Q", format=".0f"),
                 alt.Tooltip("sm_clock_mhz:Q", format=".0f")])
    limit = base.mark_line(strokeDash=[4, 4], color="#888").encode(y="max(limit_w):Q", x=alt.X("t_s:Q"))
    return alt.layer(line, limit).add_params(zoom).properties(
        width=900, height=220, title=f"Power over time (dashed: enforced limit){_cut_note(data['power'])}")


@chart("power", help="SM clock samples over time, per GPU")
def clocks(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows = _power_samples(data["power"])
    if not rows:
        return None
    return alt.Chart(inline_data(rows)).mark_line(interpolate="step-after").encode(
        x=alt.X("t_s:Q", title="time since first sample (s)"), y=alt.Y("sm_clock_mhz:Q", title="SM clock (MHz)"),
        color=alt.Color("gpu:N", title=None),
    ).properties(width=900, height=160, title="SM clock over time").interactive(bind_y=False)


@chart("totals", help="the kernels that took the most GPU time, by kind")
def kernel_time(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows = [dict(r, ms=r["total_ns"] / 1e6,
                 kernel=joined(r.get("run") or r["run_id"], f"GPU {r['device_id']}", (r["short_name"] or "")[:60]))
            for r in table_rows(data["totals"], limit=int(options.get("top", 25)))]
    if not rows:
        return None
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        y=alt.Y("kernel:N", sort="-x", title=None, axis=alt.Axis(labelLimit=420)),
        x=alt.X("ms:Q", title="total GPU time (ms)"), color=alt.Color("kind:N"),
        tooltip=["name:N", "kind:N", "family:N", "n:Q", alt.Tooltip("ms:Q", format=".3f"),
                 alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=520, title="Kernels by total GPU time")


@chart("summary", help="per run: compute slowdown and hidden communication, side by side")
def run_comparison(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    labelled = [(joined(r.get("run") or r["run_id"], f"GPU {r['device_id']}"), r) for r in table_rows(data["summary"])
                if r.get("nvtx") is None]
    return _measure_bars(labelled, ("compute_slowdown", "hidden_comm_fraction", "overlap_fraction"), label="device",
                         tooltip_format=".1%",
                         title="Runs compared: compute slowdown, hidden communication, overlap fraction")


