"""The reproduction runs of tests/data/h200x2 (collectors/reproduction.sh on 2 x H200) as a run store.

Each run is committed as what `traceql collect` kept of it: the nsys SQLite export (``NAME.sqlite.xz``), the
NVML samples (``NAME.power.parquet``) and the labels it recorded (``runs.json``). ``build_store`` ingests them
into a run store, as `traceql collect` did on the GPU machine: ``python tests/h200x2.py OUT`` does it from a shell.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "h200x2"


def runs(data: Path = DATA) -> dict[str, dict[str, str]]:
    """Run name -> the labels `traceql collect` recorded for it."""
    return {r["name"]: r["labels"]
            for r in json.loads((data / "runs.json").read_text())}


def build_store(out: str | Path, names: list[str] | None = None, data: Path = DATA) -> Path:
    """Ingest the committed runs (all, or ``names``) with their labels and power samples into the store ``out``."""
    from traceql.ingest import ingest_one

    out = Path(out)
    for name, labels in runs(data).items():
        if names is not None and name not in names:
            continue
        power = data / f"{name}.power.parquet"
        ingest_one(data / f"{name}.sqlite.xz", out, labels=labels, power_file=power if power.exists() else None)
    return out


def by_step(out: str | Path, data: Path, table: str, slow: set[int] | tuple[int, ...],
            names: list[str] | None = None) -> tuple[dict, dict[tuple[int, int], dict]]:
    """A straggler run's attribution with its steps as NVTX groups ('case:train*'), and the rows of one of its JSON
    lists (``waits``, ``critical_path``) keyed by (device, step); each step's ``slow`` label must say whether it is
    one of ``slow`` (the labels say which steps were slowed)."""
    from traceql.attribute import attribute

    doc = attribute(build_store(out, names, data=data), group_by_nvtx="case:train*").to_json()
    steps = {}
    for r in doc[table]:
        if r["nvtx"] is not None:
            labels = dict(kv.split("=", 1) for kv in r["nvtx"].split(";")[1:])
            assert labels["slow"] == str(int(int(labels["step"]) in slow))
            steps[(r["device_id"], int(labels["step"]))] = r
    return doc, steps


if __name__ == "__main__":  # python tests/h200x2.py OUT [NAME...] [--data DIR]
    args = sys.argv[1:]
    data = Path(args.pop(args.index("--data") + 1)) if "--data" in args else DATA
    args = [a for a in args if a != "--data"]
    print(build_store(args[0], args[1:] or None, data))
