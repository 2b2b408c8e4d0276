"""Text renderings of analysis results (the CLI's table, csv and json formats)."""

from __future__ import annotations

import io
import json
import shutil
import sys

import pyarrow as pa
import pyarrow.csv as pacsv

from .plain import cell


def _fmt_ns(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.3f}" if v >= 1e5 else f"{v / 1e3:.1f}us"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def _parts(r: dict) -> str:
    """The factors that predict something, and the residual: 'sm +5.0%, clock +1.2%, residual -0.3%'."""
    parts = [f"{f} {_pct(r[f])}" for f in ("sm", "dram_bw", "cache", "clock", "link") if abs(r[f] or 0) >= 0.0005]
    return ", ".join(parts + [f"residual {_pct(r['residual'])}"])


def _lost(r: dict) -> str:
    if r.get("sum_t0_ns") is None or r.get("sum_t1_ns") is None:
        return "-"
    return f"{(r['sum_t1_ns'] - r['sum_t0_ns']) / 1e6:.3f}"


def _interval(r: dict) -> str:
    if r["slowdown"] is None:
        return "-"
    if r.get("slowdown_lo") is None or r.get("slowdown_hi") is None:
        return _pct(r["slowdown"])
    return f"{_pct(r['slowdown'])} [{_pct(r['slowdown_lo'])}, {_pct(r['slowdown_hi'])}]"


def render_attribution(result, fmt: str, limit: int = 25) -> str:
    if fmt == "json":
        return json.dumps(result.to_json(), indent=1, default=str) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(result.kernels, sink)
        return sink.getvalue().to_pybytes().decode()
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    # a terminal's own width (rich folds what does not fit); a generous one when written to a file or pipe
    width = shutil.get_terminal_size((220, 40)).columns if sys.stdout.isatty() else 220
    console = Console(file=buf, width=max(width, 100), color_system=None)
    for v in result.verdicts:
        console.print(cell(v["text"]))
    if result.verdicts:
        console.print("", markup=False)
    # a run by its file name, not its hash (the hash where two runs share a name)
    paths = {r["run_id"]: r["source_path"] for r in result.runs.to_pylist()}
    base = {rid: (p or rid).rsplit("/", 1)[-1] for rid, p in paths.items()}
    names = {rid: b if list(base.values()).count(b) == 1 else f"{b} ({rid[:8]})" for rid, b in base.items()}
    summary = Table(title="per device (compute = non-communication kernels)", title_justify="left")
    for col in ("run", "device", "compute ms", "comm ms", "overlap ms", "exposed comm ms", "hidden comm",
                "overlap frac", "compute slowdown", "kernels overlapped"):
        summary.add_column(col)
    for r in result.summary.to_pylist():
        if r["nvtx"] is not None:
            continue
        summary.add_row(*map(cell, (
            names.get(r["run_id"], r["run_id"]), str(r["device_id"]), _fmt_ns(r["compute_ns"]),
            _fmt_ns(r["comm_ns"]), _fmt_ns(r["overlap_ns"]), _fmt_ns(r["exposed_comm_ns"]),
            "-" if r["hidden_comm_fraction"] is None else f"{r['hidden_comm_fraction']:.0%}",
            "-" if r["overlap_fraction"] is None else f"{r['overlap_fraction']:.1%}",
            _pct(r["compute_slowdown"]), f"{r['overlapped_kernels']}/{r['compute_kernels']}")))
    console.print(summary, markup=False)
    kernels = Table(title=f"activities by signature: compute beside communication first, then the most time lost "
                          f"(top {limit}; ms unless marked; slowdown with its 95% interval)", title_justify="left")
    overlapped = [r for r in result.kernels.to_pylist() if r["n_overlapped"]]  # never overlapped: nothing to say
    grouped = any(r["nvtx"] for r in overlapped)
    for col in ("dev", "activity", *(("nvtx",) if grouped else ()), "n ovl/all", "t0", "t1", "slowdown [95% CI]",
                "lost ms", "f", "co-runner", "SMs held", "predicted parts", "class", "why"):
        kernels.add_column(col, overflow="fold")
    for r in overlapped[:limit]:
        what = (r["short_name"] or r["name"] or "")[:36]
        if r.get("mode") is not None:
            what += f" (mode {r['mode']})"
        kernels.add_row(*map(cell, (
            str(r["device_id"]), what, *(((r["nvtx"] or "")[:40],) if grouped else ()),
            f"{r['n_overlapped']}/{r['n']}", _fmt_ns(r["t0_ns"]), _fmt_ns(r["t1_ns"]), _interval(r), _lost(r),
            "-" if r["overlap_fraction"] is None else f"{r['overlap_fraction']:.2f}", r["corunner_kind"] or "-",
            "-" if r["corunner_sms"] is None else f"{r['corunner_sms']:.0f}",
            _parts(r) if r["significant"] else "", r["class"], (r["reason"] or "")[:80])))
    console.print(kernels, markup=False)
    if len(overlapped) > limit:
        console.print(f"({len(overlapped) - limit} more overlapped rows: --limit, or --format csv|json for all)",
                      markup=False)
    for note in result.notes:
        console.print(cell(f"note: {note}"))
    return buf.getvalue()


def render_overlap(table: pa.Table, fmt: str) -> str:
    """``traceql overlap``'s rows, each run named by its trace's file name."""
    if fmt == "json":
        return json.dumps(table.to_pylist(), indent=1) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink)
        return sink.getvalue().to_pybytes().decode()
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=max(shutil.get_terminal_size((160, 40)).columns, 100), color_system=None)
    out = Table(title="per device, first to last kernel (ms; share of the span; compute = non-communication kernels)",
                title_justify="left")
    for col in ("run", "device", "span", "compute only", "comm only", "overlap", "idle", "comm overlapped",
                "kernels compute/comm"):
        out.add_column(col)

    def part(r: dict, key: str) -> str:
        return f"{r[key] / 1e6:.1f} ({r[key] / r['span_ns']:.0%})" if r["span_ns"] else f"{r[key] / 1e6:.1f}"

    rows = table.to_pylist()
    names = {r["run_id"]: (r["source_path"] or r["run_id"]).rsplit("/", 1)[-1] for r in rows}
    for r in rows:
        name = names[r["run_id"]]
        if list(names.values()).count(name) > 1:
            name += f" ({r['run_id'][:8]})"
        out.add_row(*map(cell, (name, str(r["device_id"]), f"{r['span_ns'] / 1e6:.1f}",
                                part(r, "compute_only_ns"), part(r, "comm_only_ns"), part(r, "overlap_ns"),
                                part(r, "idle_ns"),
                                "-" if r["comm_overlapped"] is None else f"{r['comm_overlapped']:.1%}",
                                f"{r['compute_kernels']}/{r['comm_kernels']}")))
    console.print(out, markup=False)
    return buf.getvalue()
