"""The report page: one self-contained HTML file (Vega, Vega-Lite and vega-embed inlined; no network).

Every string that comes from a trace (kernel names are C++ templates full of ``<>&``; NVTX texts are whatever
the program wrote) is escaped: ``html.escape`` in the page, ``\\u003c``-style escapes inside the chart JSON.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math

import pyarrow as pa

from ..errors import BadInputError
from ..output import json_safe
from ..version import __version__
from . import vega
from .charts import CHARTS, named_data
from .sections import SectionResult, labels_of

SHOWN_LABELS = ("bench", "mode", "env.NCCL_MAX_CTAS", "env.NCCL_MIN_CTAS", "env.NCCL_ALGO", "env.NCCL_PROTO",
                "version.torch", "env.NCCL_VERSION", "nsys", "command")
PERCENT_HINTS = ("slowdown", "fraction", "share", "_of_limit", "efficiency", "sequential_over_overlapped")
NAME_COLUMNS = ("name", "short_name", "text", "source_path", "reason", "command")
FACTOR_COLUMNS = {"sm", "dram_bw", "cache", "clock", "link", "residual"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1280px;color:#222;
padding:0 16px}
h1{font-size:24px;margin-bottom:4px}h2{font-size:19px;margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:20px 0 6px;color:#444}.meta{color:#666;font-size:12px}
table{border-collapse:collapse;font-size:12px;margin:8px 0;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #e3e3e3;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f6f6f6;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.name{font-family:ui-monospace,monospace;max-width:360px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.skipped{background:#fff4e5;border:1px solid #f0b76a;padding:8px 12px;border-radius:4px}
.empty{color:#888;font-style:italic}.chart{margin:10px 0;overflow-x:auto}.chart:empty{min-height:200px}
.help{color:#555;max-width:900px}
"""


def _json_for_script(obj) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' can end the element or start a comment."""
    return (json.dumps(obj, allow_nan=False, default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _fmt(col: str, value) -> tuple[str, str]:
    """(text, css class) of one table cell."""
    if value is None:
        return "–", "num"
    if isinstance(value, bool):
        return ("yes" if value else "no"), ""
    if isinstance(value, int | float):
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            return "–", "num"
        if col.endswith("_ns"):
            return f"{value / 1e6:,.3f}", "num"
        if col in FACTOR_COLUMNS or any(h in col for h in PERCENT_HINTS):
            return f"{value:+.1%}" if ("slowdown" in col or col in FACTOR_COLUMNS) else f"{value:.1%}", "num"
        if isinstance(value, float):
            return (f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"), "num"
        return (f"{value:,}" if col not in ("device_id", "run_id") else str(value)), "num"
    if isinstance(value, list | dict):
        value = json.dumps(value, default=str)
    return html.escape(str(value)), ("name" if col in NAME_COLUMNS else "")


def _header(col: str) -> str:
    return html.escape(col[:-3] + " (ms)" if col.endswith("_ns") else col)


def render_table(table: pa.Table, columns: tuple[str, ...] = (), limit: int = 25) -> str:
    if table.num_rows == 0:
        return '<p class="empty">no rows</p>'
    cols = [c for c in (columns or table.column_names) if c in table.column_names]
    rows = table.select(cols).slice(0, limit).to_pylist()
    out = ["<table><thead><tr>", *(f"<th>{_header(c)}</th>" for c in cols), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>")
        for c in cols:
            text, cls = _fmt(c, r[c])
            if cls == "name":  # long C++ names: one line, cut, the whole name on hover
                out.append(f'<td class="name" title="{text}">{text}</td>')
            else:
                out.append(f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if table.num_rows > limit:
        out.append(f'<p class="meta">{limit} of {table.num_rows:,} rows shown</p>')
    return "".join(out)


class _Page:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.specs: list[dict] = []

    def chart(self, section_chart: str, tables: dict[str, pa.Table], options: dict, title: str = "") -> None:
        with named_data() as datasets:
            try:
                chart = CHARTS[section_chart].fn(tables, options)
            except KeyError as exc:
                raise _missing_column(section_chart, title, tables, exc) from None
            if chart is None:
                self.parts.append('<p class="empty">nothing to draw for this run</p>')
                return
            spec = chart.to_dict(validate=False)  # the specs are tested; validating every one costs seconds
        if datasets:
            spec.setdefault("datasets", {}).update(json_safe(datasets))
        self.specs.append(json_safe(spec))
        self.parts.append(f'<div class="chart" id="chart-{len(self.specs) - 1}"></div>')


def _missing_column(chart: str, title: str, tables: dict[str, pa.Table], exc: KeyError) -> Exception:
    """A chart that read a column its section's queries do not give (a recipe of the user's): bad input naming the
    chart, the column and the columns there are; any other KeyError as it was (a fault of the chart's)."""
    column = exc.args[0] if exc.args else None
    if not isinstance(column, str) or any(column in t.column_names for t in tables.values()):
        return exc
    given = "; ".join(f"{name}: {', '.join(t.column_names) or 'no columns'}" for name, t in tables.items())
    return BadInputError(f"section {title!r}: chart {chart!r} reads the column {column!r}, which the section's "
                         f"queries do not give ({given}); give the query that column, or choose another chart")


def _section(page: _Page, res: SectionResult) -> None:
    s = res.section
    page.parts.append(f"<section><h2>{html.escape(s.title)}</h2>")
    if s.text:
        page.parts.append(f'<p class="help">{html.escape(s.text)}</p>')
    groups = [(None, res.tables)] if s.scope == "all" else res.per_run
    if not groups:
        page.parts.append('<p class="empty">no run had data for this section</p>')
    for label, tables in groups:
        if label is not None:
            page.parts.append(f"<h3>{html.escape(label)}</h3>")
        if s.chart:
            page.chart(s.chart, tables, s.options, s.title)
        if s.table:
            page.parts.append(render_table(tables[s.table], s.columns, s.limit))
    page.parts.append("</section>")


def _runs_table(report) -> str:
    rows = []
    for r in report.runs.to_pylist():
        labels = labels_of(r)
        shown = "; ".join(f"{k}={labels[k]}" for k in SHOWN_LABELS if k in labels and k != "command")
        rows.append({"run": r["run"], "run_id": r["run_id"], "format": r["format"], "gpus": r["gpu_names"],
                     "kernels": r["kernels"], "labels": shown, "command": labels.get("command"),
                     "source_path": r["source_path"]})
    return render_table(pa.Table.from_pylist(rows), limit=1000)


# Charts are drawn when they come near the viewport, once a page has more than EAGER_CHARTS of them (a report of a
# thousand runs has a thousand timelines: drawing every one at load kept Chromium busy for half a minute);
# window.traceqlRenderAll() draws every chart at once (the browser check calls it, so every chart is still checked).
EAGER_CHARTS = 24
EMBED_JS = """
(function () {
  const specs = %s;
  const status = {rendered: 0, failed: 0, started: new Set()};
  const done = () => {
    document.body.dataset.chartsRendered = status.rendered;
    document.body.dataset.chartsFailed = status.failed;
    if (status.rendered + status.failed === specs.length) document.body.dataset.chartsDone = "true";
  };
  const embed = (i) => {
    if (status.started.has(i)) return;
    status.started.add(i);
    const el = document.getElementById("chart-" + i);
    vegaEmbed(el, specs[i], {renderer: "svg", actions: {export: true, source: false, compiled: false, editor: false}})
      .then(() => { el.dataset.rendered = "true"; status.rendered++; done(); })
      .catch((err) => { el.dataset.error = String(err); status.failed++; console.error(err); done(); });
  };
  window.traceqlRenderAll = () => specs.forEach((_, i) => embed(i));
  done();
  if (specs.length <= %d || !("IntersectionObserver" in window)) { window.traceqlRenderAll(); return; }
  const near = new IntersectionObserver((entries) => entries.forEach((e) => {
    if (e.isIntersecting) { near.unobserve(e.target); embed(Number(e.target.id.slice(6))); }
  }), {rootMargin: "100%% 0px"});
  specs.forEach((_, i) => near.observe(document.getElementById("chart-" + i)));
})();
"""


def _recipe_label(rec) -> str:
    """'built-in recipe overlap' or 'recipe my.toml' (a built-in recipe's source says so itself)."""
    return rec.source if rec.source.startswith("built-in recipe") else f"recipe {rec.source}"


def render_page(report) -> str:
    rec = report.recipe
    page = _Page()
    for res in report.sections:
        _section(page, res)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    skipped = ""
    if report.skipped:
        items = "".join(f"<li><b>{html.escape(s['run'])}</b> ({html.escape(s['run_id'])}, "
                        f"{html.escape(str(s['source_path']))}): {html.escape(s['reason'])}</li>"
                        for s in report.skipped)
        skipped = (f'<div class="skipped" id="skipped"><b>{len(report.skipped)} run(s) skipped</b> '
                   f"(--on-error skip):<ul>{items}</ul></div>")
    title = html.escape(rec.title)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{CSS}</style>
<script>{vega.bundle()}</script>
</head><body>
<h1>{title}</h1>
<p class="meta">traceql {html.escape(__version__)} · {html.escape(_recipe_label(rec))} · {now} ·
{html.escape(report.runs_text())} · queries in {report.seconds:.1f} s</p>
{f'<p class="help">{html.escape(rec.description)}</p>' if rec.description else ''}
{skipped}
<h2>Runs</h2>
{_runs_table(report)}
{''.join(page.parts)}
<script>{EMBED_JS % (_json_for_script(page.specs), EAGER_CHARTS)}</script>
</body></html>
"""
