"""Charts of a diff report (recipes of kind ``diff``): A and B side by side, the waterfall of the step-time change by
cause, and each signature's change with its interval. Registered in :data:`traceql.report.charts.CHARTS`."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from .charts import chart, inline_data, joined, table_rows

SIDE_COLORS = {"A": "#9ecae9", "B": "#4c78a8"}
TIME_METRICS = ("step_ms", "span_ms", "compute_ms", "overlap_ms", "exposed_comm_ms", "other_ms", "compute_lost_ms")
WATERFALL_COLORS = {"total": "#4c78a8", "increase": "#e45756", "decrease": "#54a24b"}
DIRECTION_COLORS = {"slower": "#e45756", "faster": "#54a24b", "same": "#bab0ac", "new": "#f58518",
                    "vanished": "#b279a2"}


@chart("metrics", help="A and B side by side per device: step (or span), compute, overlap, exposed communication, "
                       "other time and compute time lost, in ms; the change and its interval in the tooltip")
def diff_bars(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    wanted = list(options.get("metrics", TIME_METRICS))
    stepped = {r["device"] for r in table_rows(data["metrics"]) if r["metric"] == "step_ms" and r["a"] is not None}
    rows = []
    for r in table_rows(data["metrics"]):
        if r["metric"] not in wanted or (r["metric"] == "span_ms" and r["device"] in stepped):
            continue  # with steps, every bar is per step: the whole run's span would dwarf them
        for side in ("a", "b"):
            if r[side] is not None:
                rows.append({"device": r["device"], "metric": r["metric"], "side": side.upper(), "value": r[side],
                             "delta": r["delta"], "lo": r["lo"], "hi": r["hi"],
                             "significant": {True: "yes", False: "no", None: "-"}[r["significant"]]})
    if not rows:
        return None
    order = [m for m in wanted if any(r["metric"] == m for r in rows)]
    return alt.Chart(inline_data(rows)).mark_bar().encode(
        y=alt.Y("metric:N", sort=order, title=None),
        yOffset=alt.YOffset("side:N", sort=["A", "B"]),
        x=alt.X("value:Q", title="ms (per step with steps, else per run)"),
        color=alt.Color("side:N", scale=alt.Scale(domain=list(SIDE_COLORS), range=list(SIDE_COLORS.values())),
                        title=None),
        row=alt.Row("device:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
        tooltip=["device:N", "metric:N", "side:N", alt.Tooltip("value:Q", format=".3f"),
                 alt.Tooltip("delta:Q", format="+.3f", title="B - A"), alt.Tooltip("lo:Q", format="+.3f"),
                 alt.Tooltip("hi:Q", format="+.3f"), "significant:N"],
    ).properties(width=560, height=alt.Step(11), title="A and B side by side")


@chart("waterfall", help="from A's step time to B's: compute work, time lost to each cause, exposed communication, "
                         "other time")
def diff_waterfall(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows = [dict(r, label="" if r["delta_ms"] is None or r["kind"] == "total" else f"{r['delta_ms']:+.3f}",
                 low=min(r["start_ms"], r["end_ms"]), high=max(r["start_ms"], r["end_ms"]))
            for r in table_rows(data["waterfall"])]
    if not rows:
        return None
    items = [r["item"] for r in sorted(rows, key=lambda r: (r["device"], r["order"]))]
    order = list(dict.fromkeys(items))
    base = alt.Chart().encode(x=alt.X("item:N", sort=order, title=None, axis=alt.Axis(labelAngle=-35, labelLimit=200)))
    bars = base.mark_bar().encode(
        y=alt.Y("low:Q", title="ms", scale=alt.Scale(zero=False)), y2="high:Q",
        color=alt.Color("kind:N", scale=alt.Scale(domain=list(WATERFALL_COLORS), range=list(WATERFALL_COLORS.values())),
                        title=None),
        tooltip=["device:N", "item:N", alt.Tooltip("delta_ms:Q", format="+.4f", title="change (ms)"),
                 alt.Tooltip("end_ms:Q", format=".3f", title="level (ms)"), alt.Tooltip("lo_ms:Q", format="+.3f"),
                 alt.Tooltip("hi_ms:Q", format="+.3f")])
    text = base.mark_text(dy=-6, fontSize=10).encode(y="high:Q", text="label:N")
    return alt.layer(bars, text, data=inline_data(rows)).properties(width=480, height=220).facet(
        row=alt.Row("device:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
    ).resolve_scale(y="independent").properties(title="The step-time change by cause (B - A)")


@chart("kernels", help="each signature's change, B over A - 1, with its 95% interval (run-to-run noise included)")
def diff_signatures(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    rows, seen = [], {}
    for r in table_rows(data["kernels"], limit=int(options.get("top", 30))):
        if r["change"] is None:
            continue
        label = joined(r["device"], (r["short_name"] or r["name"] or "")[:50], r["launch_b"] or r["launch_a"],
                       (r.get("nvtx") or "")[:30])
        seen[label] = seen.get(label, 0) + 1
        rows.append({"signature": label if seen[label] == 1 else f"{label} #{seen[label]}", "name": r["name"],
                     "change": r["change"], "lo": r["change_lo"], "hi": r["change_hi"], "direction": r["direction"],
                     "match": r["match"], "n": f"{r['n_a']}/{r['n_b']}"})
    if not rows:
        return None
    order = [r["signature"] for r in rows]
    y = alt.Y("signature:N", sort=order, title=None, axis=alt.Axis(labelLimit=460))
    color = alt.Color("direction:N", scale=alt.Scale(domain=list(DIRECTION_COLORS),
                                                     range=list(DIRECTION_COLORS.values())), title=None)
    tooltip = ["name:N", "match:N", "n:N", alt.Tooltip("change:Q", format="+.1%"), alt.Tooltip("lo:Q", format="+.1%"),
               alt.Tooltip("hi:Q", format="+.1%"), "direction:N"]
    rules = alt.Chart().mark_rule().encode(y=y, x=alt.X("lo:Q"), x2="hi:Q", color=color, tooltip=tooltip)
    points = alt.Chart().mark_point(filled=True, size=60).encode(
        y=y, x=alt.X("change:Q", title="B / A - 1", axis=alt.Axis(format="%")), color=color, tooltip=tooltip)
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[3, 3]).encode(x=alt.datum(0))
    return alt.layer(rules, points, zero, data=inline_data(rows)).properties(
        width=480, title="Change of each signature's duration, with its 95% interval")
