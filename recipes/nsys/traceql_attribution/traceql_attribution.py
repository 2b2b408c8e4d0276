"""``nsys recipe traceql_attribution --input DIR``: traceql's per-rank ingest as the mapper, its attribution as the
reducer, inside NVIDIA's recipe framework (``nsys_recipe``, shipped with Nsight Systems 2023 and later).

Loaded through ``NSYS_RECIPE_PATH`` (the folder holding this recipe's folder); ``docs/scale.md`` says how. Whatever
the ``--mode`` (``concurrent``, ``dask-futures``...), a mapper ingests one report into the run store under the
recipe's output folder and writes only that run's files; the reducer indexes the store once and
attributes every run, one run per unit of work (``traceql.attribute(..., executor="local")``), the same result as
``traceql attribute`` over the same store.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from nsys_recipe.lib import recipe
from nsys_recipe.lib.args import Option
from nsys_recipe.log import logger


class TraceqlAttribution(recipe.Recipe):
    @staticmethod
    def _mapper_func(report_path: str, store_dir: str) -> tuple[str, str | None, dict | None]:
        """Ingest one report: (report, error or None, the run's index entry)."""
        from traceql.errors import TraceqlError
        from traceql.ingest import ingest_one

        try:
            info = ingest_one(report_path, store_dir, index=False)
        except TraceqlError as exc:
            return report_path, str(exc), None
        return report_path, None, info.manifest_entry()

    def mapper_func(self, context):
        return context.wait(context.map(self._mapper_func, self._parsed_args.input, store_dir=str(self._store)))

    def reducer_func(self, mapper_res) -> None:
        from traceql import store
        from traceql.attribute import attribute

        failed = [(path, err) for path, err, _ in mapper_res if err is not None]
        for path, err in failed:
            logger.error(f"{path}: not ingested: {err}")
        entries = {e["run_id"]: e for _, err, e in mapper_res if err is None}
        if not entries:
            raise RuntimeError("traceql: no report could be ingested")
        store.reindex(self._store, entries)
        result = attribute(self._store, executor="local")
        out = Path(self.add_output_file("attribution.json"))
        result.write(out.parent)
        for name in ("kernels.parquet", "summary.parquet"):
            self.add_output_file(name)
        Path(self.add_output_file("failed.json")).write_text(json.dumps(dict(failed), indent=1))

    def run(self, context) -> None:
        super().run(context)
        self._store = Path(self.add_output_file("runs"))
        self.reducer_func(self.mapper_func(context))
        self._analysis_dict.update({"EndTime": str(datetime.now()), "Outputs": self._output_files})
        self.create_analysis_file()

    @classmethod
    def get_argument_parser(cls):
        parser = super().get_argument_parser()
        parser.add_recipe_argument(Option.INPUT, required=True)
        return parser
