"""Text renderings of a diff (``traceql diff``'s table, csv and json formats)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pacsv

from .diff_match import shape_change
from .plain import cell, table_width
from .plain import ms as _ms

FORMATS = ("table", "json", "csv")


def _num(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and unit == ""):
        return f"{v:g}"
    return f"{v:.4g}" if abs(v) < 1 else f"{v:,.3f}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:+.1%}"


def _delta(r: dict) -> str:
    if r["delta"] is None:
        return "-"
    text = f"{r['delta']:+.4g}"
    if r["lo"] is not None and r["hi"] is not None:
        text += f" [{r['lo']:+.4g}, {r['hi']:+.4g}]"
    return text


def render_diff(d, fmt: str = "table", limit: int = 25, gate_lines: list[str] = ()) -> str:
    if fmt == "json":
        return json.dumps(d.to_json(), indent=1, default=str) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(d.kernels, sink)
        return sink.getvalue().to_pybytes().decode()
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    # a terminal's own width, else 100 columns (rich folds what does not fit: names are wrapped, never cut)
    console = Console(file=buf, width=table_width(), color_system=None)

    def say(text: str = "") -> None:
        console.print(cell(text))

    for side, info in (("A", d.a), ("B", d.b)):
        runs = ", ".join(f"{r['name']} ({r['run_id']})" for r in info["runs"])
        say(f"{side}: {info['spec']}: {runs}")
    if d.label_changes:
        say("what differs: " + "; ".join(f"{c['key']} {c['a']} -> {c['b']}" for c in d.label_changes))
    say()
    for v in d.verdicts:
        say(v["text"])
    say()
    per_device = Table(title="per device: A, B, the change B - A with its 95% interval (run-to-run noise included)",
                       title_justify="left")
    for col in ("device", "metric", "A", "B", "change [95%]", "relative", "significant"):
        per_device.add_column(col, overflow="fold")
    for r in d.metrics.to_pylist():
        if r["a"] is None and r["b"] is None:
            continue
        significant = {True: "yes", False: "no", None: "-"}[r["significant"]]
        per_device.add_row(*map(cell, (r["device"], f"{r['metric']}", _num(r["a"], r["unit"]), _num(r["b"], r["unit"]),
                                       _delta(r), _pct(r["rel"]), significant)))
    console.print(per_device)
    rows = d.kernels.to_pylist()
    grouped = any(r["nvtx"] for r in rows)
    sigs = Table(title=f"signatures: significant changes first, then the most time changed (top {limit} of "
                       f"{len(rows)}; durations are the statistic's centre; time per step in ms)",
                 title_justify="left")
    for col in ("device", "activity", *(("nvtx",) if grouped else ()), "match", "n A/B", "A", "B",
                "change [95%]", "direction", "time A->B", "slowdown A -> B", "class A -> B"):
        sigs.add_column(col, overflow="fold")
    for r in rows[:limit]:
        what = r["short_name"] or r["name"] or ""
        match = r["match"] if r["match"] != "name" else f"name ({shape_change(r['launch_a'], r['launch_b'])})"
        change = _pct(r["change"])
        if r["change_lo"] is not None:
            change += f" [{_pct(r['change_lo'])}, {_pct(r['change_hi'])}]"
        sigs.add_row(*map(cell, (r["device"], what, *((r["nvtx"] or "",) if grouped else ()), match,
                                 f"{r['n_a']}/{r['n_b']}", _ms(r["dur_a_ns"]), _ms(r["dur_b_ns"]), change,
                                 r["direction"], f"{_ms(r['time_a_ns'])} -> {_ms(r['time_b_ns'])}",
                                 f"{_pct(r['slowdown_a'])} -> {_pct(r['slowdown_b'])}",
                                 f"{r['class_a'] or '-'} -> {r['class_b'] or '-'}")))
    console.print(sigs)
    if len(rows) > limit:
        say(f"({len(rows) - limit} more rows: --limit, or --format csv|json for all)")
    for line in gate_lines:
        say(line)
    for note in d.notes:
        say(f"note: {note}")
    return buf.getvalue()
