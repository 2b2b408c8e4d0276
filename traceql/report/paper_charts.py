"""Charts of the paper recipe (traceql.paper): figures per configuration with their intervals, and the breakdown."""

from __future__ import annotations

import altair as alt
import pyarrow as pa

from .charts import FACTOR_COLORS, FACTORS, chart, inline_data, table_rows

SHOWN = ("compute_slowdown", "seq_over_ovl", "comm_slowdown", "overlap_ratio")


@chart("configs", help="per configuration: the paper's figures, each point with its 95% interval")
def paper_figures(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    figures = tuple(options.get("figures", SHOWN))
    rows = [{"config": r["label"], "figure": f, "value": r[f], "lo": r[f"{f}_lo"], "hi": r[f"{f}_hi"],
             "dtype": r["dtype"] or "–"}
            for r in table_rows(data["configs"]) for f in figures if r.get(f) is not None]
    if not rows:
        return None
    base = alt.Chart(inline_data(rows)).encode(y=alt.Y("config:N", title=None, axis=alt.Axis(labelLimit=360)))
    bars = base.mark_rule().encode(x=alt.X("lo:Q", title=None, axis=alt.Axis(format="%")), x2="hi:Q")
    points = base.mark_point(filled=True).encode(
        x="value:Q", color=alt.Color("dtype:N", title="dtype"),
        tooltip=["config:N", "figure:N", alt.Tooltip("value:Q", format="+.1%"), alt.Tooltip("lo:Q", format="+.1%"),
                 alt.Tooltip("hi:Q", format="+.1%")])
    return alt.layer(bars, points).properties(width=220).facet(
        column=alt.Column("figure:N", sort=list(figures), title=None)).resolve_scale(x="independent").properties(
        title="The paper's figures per configuration (point and 95% interval over iterations)")


@chart("breakdown", help="per configuration and side: the overlapped instances' slowdown split by cause")
def paper_breakdown(data: dict[str, pa.Table], options: dict) -> alt.TopLevelMixin | None:
    sides = tuple(options.get("sides", ("compute", "comm")))
    shown = [r for r in table_rows(data["breakdown"]) if r["side"] in sides]
    rows = [{"config": f"{r['side']} · {r['label']}", "part": f, "value": r[f], "observed": r["observed"],
             "cause": r["cause"]} for r in shown for f in FACTORS if r.get(f) is not None]
    if not rows:
        return None
    observed = [{"config": f"{r['side']} · {r['label']}", "observed": r["observed"], "lo": r["observed_lo"],
                 "hi": r["observed_hi"], "cause": r["cause"]} for r in shown if r["observed"] is not None]
    y = alt.Y("config:N", title=None, axis=alt.Axis(labelLimit=420))
    bars = alt.Chart(inline_data(rows)).mark_bar().encode(
        y=y, x=alt.X("sum(value):Q", title="slowdown of the overlapped instances, by cause", axis=alt.Axis(format="%")),
        color=alt.Color("part:N", scale=alt.Scale(domain=list(FACTORS), range=list(FACTOR_COLORS)), title="cause"),
        order=alt.Order("part:N"),
        tooltip=["config:N", "part:N", alt.Tooltip("value:Q", format="+.1%"),
                 alt.Tooltip("observed:Q", format="+.1%"), "cause:N"])
    ticks = alt.Chart(inline_data(observed)).mark_tick(color="black", thickness=2).encode(
        y=y, x="observed:Q", tooltip=["config:N", alt.Tooltip("observed:Q", format="+.1%"),
                                      alt.Tooltip("lo:Q", format="+.1%"), alt.Tooltip("hi:Q", format="+.1%"),
                                      "cause:N"])
    return alt.layer(bars, ticks).properties(
        width=520, title="Why each configuration slowed down (attribution, overlapped mode; tick: observed)")
