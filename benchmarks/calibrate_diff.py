"""Calibration data for the run-to-run noise of traceql.diff (RUN_NOISE, ABS_NOISE_NS): the same work, measured in
different runs on the same GPU model.

Pairs of runs hold work that the difference between them cannot touch:

* the overlap microbenchmark at three NCCL_MAX_CTAS settings (tests/data/h200/suite: overlap, overlap_ctas2,
  overlap_ctas8; one program, collected one after the other): every activity that ran alone and is not
  communication;
* the H200 known-cause traces collected at two GEMM sizes (tests/data/h200/known_cause.sqlite.xz and
  known_cause_6144.sqlite.xz): activities that ran alone whose signature and case range are in both (copies,
  bandwidth-bound and sweep kernels, memsets);
* repeated runs of one program (tests/data/h200x2: runs with the same labels but name and time): compared with
  traceql.diff over whole runs and per step, the widening each change of nothing needs beyond its bootstrap interval
  (of signatures, of a GPU's time measures as a share of the step, of fractions).

For each signature with 4 instances a side or more (the fewest for which a diff gives an interval): the shift of the
median between the runs, relative and in ns. Work longer than ABS_NOISE_NS / RUN_NOISE must shift by less than
RUN_NOISE, shorter work by less than ABS_NOISE_NS.

    python benchmarks/calibrate_diff.py
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

import traceql
from traceql import store
from traceql.diff_model import ABS_NOISE_NS, FRACTION_NOISE, RUN_NOISE, STEP_NOISE
from traceql.ingest import ingest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests/data/h200/suite"
KNOWN = [ROOT / "tests/data/h200/known_cause.sqlite.xz", ROOT / "tests/data/h200/known_cause_6144.sqlite.xz"]
H200X2 = ROOT / "tests/data/h200x2"

MIN_PAIR = 4  # the fewest instances a side for which traceql.diff gives a change an interval (Mann-Whitney, exact)
ALONE = """
SELECT run_id, device_id, activity, name, grid, block, dynamic_smem_bytes, bytes,
       CASE WHEN $by_range THEN split_part(step_text, ';', 1) END AS range_name, list(dur_ns) AS durs
FROM instance_facts WHERE ($all OR (overlap_ns = 0 AND activity_class <> 'comm')) AND dur_ns > 0
GROUP BY ALL
"""


def shifts(dirs: list[Path], runs: list[str], *, by_range: bool, everything: bool) -> list[tuple]:
    """(|relative shift|, shift ns, median A, name, runs, n a side) per signature in both of each pair of runs."""
    con = store.connect(dirs, run_ids=set(runs))
    rows = con.execute(ALONE, {"by_range": by_range, "all": everything}).fetchall()
    con.close()
    by_key: dict[tuple, dict[str, np.ndarray]] = {}
    for run, *key, durs in rows:
        by_key.setdefault(tuple(key), {})[run] = np.asarray(durs, dtype=float)
    out = []
    for key, per_run in by_key.items():
        for ra, rb in itertools.combinations(sorted(per_run), 2):
            a, b = per_run[ra], per_run[rb]
            if min(len(a), len(b)) < MIN_PAIR:
                continue
            ma, mb = float(np.median(a)), float(np.median(b))
            out.append((abs(mb / ma - 1), mb - ma, ma, f"GPU {key[0]} {key[2][:48]} {key[7] or ''}".strip(),
                        f"{ra[:8]}/{rb[:8]}", f"{len(a)}/{len(b)}"))
    return out


def report(title: str, rows: list[tuple]) -> None:
    floor = ABS_NOISE_NS / RUN_NOISE  # work shorter than this is judged by ABS_NOISE_NS
    long_rows = [r for r in rows if r[2] >= floor]
    short_rows = [r for r in rows if r[2] < floor]
    print(f"\n## {title}: {len(rows)} signature pairs ({len(long_rows)} longer than {floor:,.0f} ns)")
    for rel, d, med, name, runs, n in sorted(rows, reverse=True)[:8]:
        print(f"  {rel:7.2%} {d:+10.0f} ns  median {med:12,.0f} ns  n {n:>9}  {runs}  {name}")
    if long_rows:
        print(f"  largest relative shift of work >= {floor:,.0f} ns: {max(r[0] for r in long_rows):.2%} "
              f"(RUN_NOISE = {RUN_NOISE:.0%})")
    if short_rows:
        print(f"  largest shift of shorter work: {max(abs(r[1]) for r in short_rows):.0f} ns "
              f"(ABS_NOISE_NS = {ABS_NOISE_NS:.0f})")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        con = store.connect(SUITE, views=False)
        overlap = [r for r, in con.sql("SELECT run_id FROM runs WHERE json_extract_string(labels_json, '$.bench') "
                                       "= 'overlap'").fetchall()]
        con.close()
        report("overlap microbenchmark, three NCCL_MAX_CTAS settings, non-communication work alone",
               shifts([SUITE], overlap, by_range=False, everything=False))
        known = Path(tmp) / "known"
        runs = [i.run_id for i in ingest(KNOWN, known)]
        report("H200 known-cause traces at two GEMM sizes, work alone in the same case range",
               shifts([known], runs, by_range=True, everything=False))
        if (H200X2 / "README.md").exists():
            repeated_pairs(Path(tmp))


def repeated_pairs(tmp: Path) -> None:
    """Runs of one program (the same labels but name and time) compared with traceql.diff, whole runs and per step:
    how far beyond its bootstrap interval each change of nothing reaches, i.e. the noise a diff must allow for."""
    sys.path.insert(0, str(ROOT / "tests"))
    from h200x2 import build_store
    from h200x2 import runs as h200x2_runs

    labels = h200x2_runs()
    configs: dict[str, list[str]] = {}
    for name, lab in labels.items():
        configs.setdefault(repr(sorted((k, v) for k, v in lab.items() if k not in ("name", "collected_at"))),
                           []).append(name)
    for members in configs.values():
        if len(members) < 2:
            continue
        repeated = build_store(tmp / "h200x2", members)
        for a, b in itertools.combinations(members, 2):
            for glob in (None, "case:*"):
                d = traceql.diff(f"{repeated}@{a}", f"{repeated}@{b}", group_by_nvtx=glob)
                print(f"\n## h200x2: {a} against {b} ({'per step, ' + glob if glob else 'whole runs'}): "
                      f"the widening each change of nothing needs beyond its bootstrap interval")
                needs = []
                for r in d.kernels.to_pylist():
                    if r["change_lo"] is None:
                        continue
                    used = max(RUN_NOISE, ABS_NOISE_NS / r["dur_a_ns"])
                    need = max(0.0, r["change_lo"] + used, -(r["change_hi"] - used))
                    needs.append((need, r["device"], (r["short_name"] or "")[:44], r["n_a"], (r["nvtx"] or "")[:40]))
                for need, dev, name, n, nvtx in sorted(needs, reverse=True)[:5]:
                    print(f"  signature {need:7.2%}  {dev} {name} n {n} {nvtx}")
                print(f"  largest: {max(n[0] for n in needs):.2%} (RUN_NOISE = {RUN_NOISE:.0%}); "
                      f"{sum(r['significant'] for r in d.kernels.to_pylist())} significant signatures")
                for m in d.metrics.to_pylist():
                    if m["lo"] is None or m["unit"] not in ("ms", ""):
                        continue
                    if m["unit"] == "":
                        used, scale, what = FRACTION_NOISE, 1.0, f"(FRACTION_NOISE = {FRACTION_NOISE})"
                    else:
                        step = next(x for x in d.metrics.to_pylist() if x["device"] == m["device"]
                                    and x["metric"] == ("step_ms" if glob else "span_ms"))
                        scale = max(step["a"], step["b"])
                        used, what = STEP_NOISE * scale, f"of the step (STEP_NOISE = {STEP_NOISE:.0%})"
                    need = max(0.0, m["lo"] + used, -(m["hi"] - used)) / scale
                    if need > 0 or m["metric"] in ("step_ms", "span_ms", "hidden_comm_fraction"):
                        print(f"  {m['device']} {m['metric']:<21} change {m['delta']:+10.4f}  needs {need:.4f} {what}")


if __name__ == "__main__":
    main()
