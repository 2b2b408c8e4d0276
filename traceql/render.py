"""Text renderings of analysis results (the CLI's table, csv and json formats)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pacsv

from .plain import cell, run_names, table_width
from .plain import ms as _fmt_ns


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


def _corunner(r: dict) -> str:
    """The co-runner class and the SMs it held: 'comm 24'."""
    if r["corunner_kind"] is None:
        return "-"
    return r["corunner_kind"] + ("" if r["corunner_sms"] is None else f" {r['corunner_sms']:.0f}")


def render_attribution(result, fmt: str, limit: int = 25) -> str:
    if fmt == "json":
        return json.dumps(result.to_json(), indent=1, default=str) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(result.kernels, sink)
        return sink.getvalue().to_pybytes().decode()
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = io.StringIO()
    # a terminal's own width, else 100 columns (rich folds what does not fit: names are wrapped, never cut)
    console = Console(file=buf, width=table_width(), color_system=None)

    def table(title: str, columns: tuple[str, ...], text: dict[str, int]) -> Table:
        """A table whose number columns never wrap; the ``text`` columns (name: least width) fold: a name is
        wrapped, never cut."""
        t = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
        for col in columns:
            t.add_column(col, overflow="fold", no_wrap=col not in text, min_width=text.get(col))
        return t

    for v in result.verdicts:
        console.print(cell(v["text"]))
    if result.verdicts:
        console.print("", markup=False)
    names = run_names(result.runs.to_pylist())  # a run by its name, not its hash
    summary = table("per device (ms; compute = non-communication kernels; exposed: communication alone; hidden: "
                    "its share under compute; ovl frac: share of compute overlapped; slowdown: of compute beside "
                    "other work; ovl kernels: compute kernels overlapped / all)",
                    ("run", "dev", "compute", "comm", "overlap", "exposed", "hidden", "ovl frac", "slowdown",
                     "ovl kernels"), {"run": 14})
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
    steps = sorted((r for r in (result.critical_path.to_pylist() if result.critical_path is not None else [])
                    if r["nvtx"] is not None), key=lambda r: -(r["reached_all_ms"] + r["reached_wait_ms"]))
    if steps:
        paths = table(f"steps' critical paths (ms, per NVTX group, its instances summed; top {limit} by what reached "
                      "them; lost: the "
                      "group's own activities' loss beyond their baselines; reached: what of the losses on the path, "
                      "on any device, reached the steps' time; waits: what waiting for late ranks cost them)",
                      ("run", "dev", "nvtx", "steps", "time", "path on", "lost", "reached", "of it SMs", "waits"),
                      {"run": 12, "nvtx": 16})
        for r in steps[:limit]:
            on = (f"dev {r['set_by_device_id']} {r['path_other_devices_ms']:.1f}"
                  if r["set_by_device_id"] is not None else "-")
            paths.add_row(*map(cell, (
                names.get(r["run_id"], r["run_id"]), str(r["device_id"]), r["nvtx"], str(r["steps"]),
                f"{r['step_ms']:.1f}", on, f"{r['lost_all_ms']:.1f}", f"{r['reached_all_ms']:.1f}",
                f"{r['reached_sm_ms']:.1f}", f"{r['reached_wait_ms']:.1f}")))
        console.print(paths, markup=False)
    overlapped = [r for r in result.kernels.to_pylist() if r["n_overlapped"]]  # never overlapped: nothing to say
    grouped = any(r["nvtx"] for r in overlapped)
    several = len({r["run_id"] for r in overlapped}) > 1  # which run a row is of, when there is a choice
    kernels = table(f"activities by signature: compute beside communication first, then the most time lost (top "
                    f"{limit}; slowdown with its 95% interval; lost in ms; f: share of the time overlapped; co-runner "
                    f"and the SMs it held; [n]: why, below the table; t0 and t1 in --format csv|json)",
                    (*(("run",) if several else ()), "dev", "activity", *(("nvtx",) if grouped else ()), "n ovl/all",
                     "slowdown [95% CI]", "lost", "f", "co-runner", "predicted parts", "class"),
                    {"run": 12, "activity": 16, "nvtx": 12, "predicted parts": 10, "slowdown [95% CI]": 14,
                     "class": 8})
    reasons: list[str] = []  # each row's why, as a numbered line under the table (one sentence per row)
    for r in overlapped[:limit]:
        if r["reason"]:
            reasons.append(r["reason"])
        what = r["short_name"] or r["name"] or ""
        if r.get("mode") is not None:
            what += f" (mode {r['mode']})"
        kernels.add_row(*map(cell, (
            *((names.get(r["run_id"], r["run_id"]),) if several else ()),
            str(r["device_id"]), what, *((r["nvtx"] or "",) if grouped else ()),
            f"{r['n_overlapped']}/{r['n']}", _interval(r), _lost(r),
            "-" if r["overlap_fraction"] is None else f"{r['overlap_fraction']:.2f}", _corunner(r),
            _parts(r) if r["significant"] else "", r["class"] + (f" [{len(reasons)}]" if r["reason"] else ""))))
    console.print(kernels, markup=False)
    for i, reason in enumerate(reasons, 1):
        console.print(cell(f"[{i}] {reason}"))
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
    from rich import box
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=table_width(), color_system=None)
    out = Table(title="per device, first to last kernel (ms; share of the span; compute = non-communication "
                      "kernels; comm hidden: its share under compute; kernels: compute/comm)",
                title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("run", "dev", "span", "compute only", "comm only", "overlap", "idle", "comm hidden", "kernels"):
        # the run's name folds (wrapped, never cut); the figures stay whole
        out.add_column(col, overflow="fold", min_width=14 if col == "run" else None)

    def part(r: dict, key: str) -> str:
        return f"{r[key] / 1e6:.1f} ({r[key] / r['span_ns']:.0%})" if r["span_ns"] else f"{r[key] / 1e6:.1f}"

    rows = table.to_pylist()
    names = run_names([{"run_id": r["run_id"], "source_path": r["source_path"], "name": r.get("name")}
                       for r in rows])
    for r in rows:
        out.add_row(*map(cell, (names[r["run_id"]], str(r["device_id"]), f"{r['span_ns'] / 1e6:.1f}",
                                part(r, "compute_only_ns"), part(r, "comm_only_ns"), part(r, "overlap_ns"),
                                part(r, "idle_ns"),
                                "-" if r["comm_overlapped"] is None else f"{r['comm_overlapped']:.1%}",
                                f"{r['compute_kernels']}/{r['comm_kernels']}")))
    console.print(out, markup=False)
    return buf.getvalue()
