"""Plain-text forms of the paper's tables: numbers with their intervals, for the CLI, the report and the docs."""

from __future__ import annotations

import math

import pyarrow as pa

from ..plain import plain

# how each figure reads: all are relative (slowdowns, ratios, efficiencies), shown in percent
UNITS = {"iter_ns": "ms", "compute_ns": "ms", "comm_ns": "ms", "energy_per_iter_j": "J", "mean_power_w": "W",
         "peak_power_w": "W"}


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def number(v, unit: str = "%", signed: bool = True) -> str:
    if _missing(v):
        return "–"
    if unit == "%":
        v = round(v, 3) + 0.0  # no "-0.0%"
        return f"{v:+.1%}" if signed else f"{v:.1%}"
    if unit == "ms":
        return f"{v / 1e6:.3f}"
    if unit == "J":
        return f"{v:.3g}"
    return f"{v:.0f}"


def with_interval(v, lo, hi, unit: str = "%", signed: bool = True) -> str:
    """``+4.4% [+3.7%, +5.0%]``; the point alone when there is no interval; ``–`` when there is no point."""
    if _missing(v):
        return "–"
    if _missing(lo) or _missing(hi):
        return f"{number(v, unit, signed)} [no interval]"
    return f"{number(v, unit, signed)} [{number(lo, unit, signed)}, {number(hi, unit, signed)}]"


def ci(row: dict, name: str, unit: str = "%", signed: bool = True) -> str:
    return with_interval(row.get(name), row.get(f"{name}_lo"), row.get(f"{name}_hi"), unit, signed)


def headline_text(headline: pa.Table) -> pa.Table:
    """The headline with each average and maximum as one text column, the paper's values beside them."""
    rows = []
    for r in headline.to_pylist():
        rows.append({"figure": r["figure"], "group_by": r["group_by"], "group": r["group"], "configs": r["configs"],
                     "clock_left_out": r.get("clock_left_out") or 0,
                     "average": ci(r, "avg"), "maximum": ci(r, "max"), "max_config": r["max_config"],
                     "paper": (f"{number(r['paper_avg'], signed=False)} avg, {number(r['paper_max'], signed=False)} max"
                               if not (_missing(r["paper_avg"]) and _missing(r["paper_max"])) else "")})
    ints = ("configs", "clock_left_out")
    return pa.Table.from_pylist(rows, schema=pa.schema([(k, pa.int64() if k in ints else pa.string())
                                                        for k in ("figure", "group_by", "group", "configs",
                                                                  "clock_left_out", "average", "maximum", "max_config",
                                                                  "paper")]))


def intervals_text(table: pa.Table, keep: tuple[str, ...]) -> pa.Table:
    """Every ``X, X_lo, X_hi`` triple of ``table`` as one text column ``X``; the ``keep`` columns as they are."""
    names = table.column_names
    triples = [n for n in names if f"{n}_lo" in names and f"{n}_hi" in names]
    rows = []
    for r in table.to_pylist():
        out = {k: r[k] for k in keep if k in names}
        for n in triples:
            unit = UNITS.get(n, "%")
            out[n] = ci(r, n, unit, signed=unit == "%")
        rows.append(out)
    cols = [k for k in keep if k in names] + triples
    return pa.Table.from_pylist(rows, schema=pa.schema([(c, table.schema.field(c).type if c in keep else pa.string())
                                                        for c in cols]))


CONFIG_SHOWN = ("compute_slowdown", "compute_slowdown_vs_seq", "seq_over_ovl", "comm_slowdown", "overlap_efficiency")
TITLES = {"headline": "The paper's figures over configurations (average with its interval; maximum: the configuration "
                      "with the highest point, with its interval; clock_left_out: configurations whose modes ran at "
                      "SM clocks different enough to account for the figure alone, left out)",
          "configs": "Per configuration (95% intervals over iterations)",
          "modes": "Per configuration and mode: time per iteration (ms), energy per iteration (all GPUs), mean and "
                   "peak power per GPU",
          "breakdown": "Why: slowdown of the overlapped instances against their baselines, by cause"}


def text_table(name: str, table: pa.Table) -> pa.Table:
    """The form of each table the terminal and the report show: one text cell per number and its interval."""
    if name == "headline":
        return headline_text(table)
    if name == "configs":
        t = intervals_text(table, ("label", "modes", "iterations", "clock_biased"))
        return t.select(["label", "modes", "iterations", *CONFIG_SHOWN, "clock_biased"])
    if name == "modes":
        t = intervals_text(table, ("label", "mode", "iterations", "note"))
        return t.select(["label", "mode", "iterations", "iter_ns", "energy_per_iter_j", "mean_power_w",
                         "peak_power_w", "note"])
    rows = []
    for r in table.to_pylist():
        parts = [f"{f} {number(r[f])}" for f in ("sm", "dram_bw", "cache", "clock", "link") if abs(r[f] or 0) >= 5e-4]
        rows.append({"label": r["label"], "side": r["side"], "instances": r["instances"],
                     "observed": ci(r, "observed"),
                     "predicted": with_interval(r["predicted"], r["predicted_lo"], r["predicted_hi"]),
                     "parts": ", ".join(parts + [f"residual {number(r['residual'])}"]), "cause": r["cause"]})
    cols = ("label", "side", "instances", "observed", "predicted", "parts", "cause")
    return pa.Table.from_pylist(rows, schema=pa.schema([(c, pa.int64() if c == "instances" else pa.string())
                                                        for c in cols]))


def render(result, fmt: str, table: str | None = None) -> str:
    """``result`` (traceql.paper.Paper) as text: ``table`` (aligned columns), ``json`` or ``csv`` (one table)."""
    import io
    import json

    import pyarrow.csv as pacsv

    from . import TABLES

    names = [table] if table else list(TABLES)
    if fmt == "json":
        doc = result.to_json()
        if table:
            doc = {table: doc[table], "runs": doc["runs"], "skipped": doc["skipped"]}
        return json.dumps(doc, indent=1, default=str) + "\n"
    if fmt == "csv":
        sink = pa.BufferOutputStream()
        pacsv.write_csv(result.table(table or "headline"), sink)
        return sink.getvalue().to_pybytes().decode()
    out = io.StringIO()
    for name in names:
        t = text_table(name, result.table(name))
        out.write(f"{TITLES[name]}\n")
        out.write(aligned(t) if t.num_rows else "(no rows)\n")
        out.write("\n")
    return out.getvalue()


def aligned(table: pa.Table) -> str:
    cols = table.column_names
    cells = [[("–" if v is None else plain(v)) for v in row.values()] for row in table.to_pylist()]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"
