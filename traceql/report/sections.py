"""A section's computed tables (:class:`SectionResult`), and a run's labels as the report shows them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa

from .recipe import Section


@dataclass
class SectionResult:
    section: Section
    tables: dict[str, pa.Table]  # query name -> rows of every run (reduce), each tagged run_id and run
    per_run: list[tuple[str, dict[str, pa.Table]]] = field(default_factory=list)  # scope run: (run label, tables)


def labels_of(run: dict) -> dict[str, str]:
    try:
        return json.loads(run.get("labels_json") or "{}")
    except json.JSONDecodeError:
        return {}
