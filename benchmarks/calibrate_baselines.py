"""Calibration data for the baseline constants of traceql.attribution.baselines, from the bundled real traces.

Within one case range of the known-cause and contention traces (`case:...`: the same work by construction), the
isolated durations of a signature are one kind of work, so their largest gap between consecutive sorted values
(ratio) and their relative spread measure noise. MODE_RATIO and MAX_SPREAD must sit above every such value.
Other ranges (a training step's `forward`, the mixed-K `step`) hold different work under one signature: the
largest gap there shows how far apart real mixtures are, and MODE_RATIO must sit below it.

    python benchmarks/calibrate_baselines.py [TRACE ...]     (default: every bundled trace)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from traceql import stats, store
from traceql.attribution import baselines
from traceql.ingest import ingest

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "tests/data/h100/known_cause.sqlite.xz", ROOT / "tests/data/h200/known_cause.sqlite.xz",
           ROOT / "tests/data/h200/contention.sqlite.xz", ROOT / "tests/data/h200/overlap.sqlite.xz",
           ROOT / "tests/data/h200/train_ddp.sqlite.xz"]


def main(traces: list[Path]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ingest(traces, Path(tmp) / "runs")
        con = store.connect(Path(tmp) / "runs")
        rows = con.sql("""SELECT r.source_path, i.device_id, i.sig, any_value(i.short_name), i.step_text,
                                 list(i.dur_ns ORDER BY i.dur_ns)
                          FROM instance_facts i JOIN runs r USING (run_id)
                          WHERE i.overlap_ns = 0 AND i.dur_ns > 0 AND i.step_text IS NOT NULL
                          GROUP BY ALL HAVING count(*) >= 4""").fetchall()
    gaps, spreads, mixtures = [], [], []
    for src, dev, _sig, name, text, durs in rows:
        d = np.array(durs, dtype=float)
        big = d[d >= 2 * baselines.MODE_MIN_GAP_NS]  # gaps of short kernels are timer jitter (MODE_MIN_GAP_NS)
        gap = float(np.max(big[1:] / big[:-1])) if len(big) >= 2 else 1.0
        if not text.startswith("case:"):
            mixtures.append((gap, Path(src).name, dev, name, text, len(d)))
            continue
        gaps.append((gap, Path(src).name, dev, name, text, len(d)))
        iqr = np.subtract(*np.percentile(d, [75, 25]))
        spreads.append((stats.relative_spread(d), iqr, Path(src).name, name, text, len(d)))
    gaps.sort(reverse=True)
    print(f"{len(gaps)} (trace, device, signature, case range) groups of >= 4 isolated instances")
    print("largest gap ratio between consecutive isolated durations within one case range (noise):")
    for g, src, dev, name, text, n in gaps[:8]:
        print(f"  {g:6.3f}  {src} dev {dev} {name[:40]} in {text[:50]!r} (n={n})")
    mixtures.sort(reverse=True)
    print("largest gap ratio in ranges that may mix work (not case ranges):")
    for g, src, dev, name, text, n in mixtures[:6]:
        print(f"  {g:6.3f}  {src} dev {dev} {name[:40]} in {text[:50]!r} (n={n})")
    spreads.sort(key=lambda r: -r[0])
    print("largest relative spread (IQR/median) within one case range, with the IQR in ns:")
    for sp, iqr, src, name, text, n in spreads[:5]:
        print(f"  {sp:6.3f} ({iqr:.0f} ns)  {src} {name[:40]} in {text[:40]!r} (n={n})")
    wide = [r for r in spreads if r[1] > baselines.MODE_MIN_GAP_NS]
    print(f"  largest among spreads wider than MODE_MIN_GAP_NS: {max((r[0] for r in wide), default=0):.4f}")
    print(f"constants: MODE_RATIO {baselines.MODE_RATIO}, MAX_SPREAD {baselines.MAX_SPREAD}, "
          f"MODE_MIN_GAP_NS {baselines.MODE_MIN_GAP_NS}")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or DEFAULT)
