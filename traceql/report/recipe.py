"""Recipes: small declarative TOML files naming the queries and charts of a report.

A recipe is a title and a list of sections. Each section names its queries (a view of ``queries/`` or a
SELECT of its own), a chart from :mod:`traceql.report.charts`, and a scope: ``run`` sections are computed once
per run (map) and shown per run; ``all`` sections are computed per run too and then concatenated into one
comparison across runs (reduce). Built-in recipes live in the package's ``recipes/`` folder; ``--recipe`` also
takes a path to a file of one's own. The format is documented in ``docs/report.md``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import BadInputError, MissingInputError

SCOPES = ("run", "all")
KINDS = ("runs", "diff")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Query:
    """One dataset of a section: ``SELECT * FROM view [WHERE ...] [ORDER BY ...] [LIMIT n]`` or raw SQL."""

    name: str
    view: str | None = None
    sql: str | None = None
    where: str | None = None
    order_by: str | None = None
    limit: int | None = None

    @property
    def source(self) -> str:
        """What the query reads: its own SQL (as a subquery) or its view."""
        return f"({self.sql.strip().rstrip(';')})" if self.sql is not None else f'"{self.view}"'

    def select(self, per_run: bool = True) -> str:
        """The SELECT; ``per_run``: for one run, bound as parameter ``$run_id`` by the caller (else every row)."""
        conditions = ["run_id = $run_id"] if per_run else []
        if self.where:
            conditions.append(f"({self.where})")
        body = f"SELECT * FROM {self.source}" + (f" WHERE {' AND '.join(conditions)}" if conditions else "")
        if self.order_by:
            body += f" ORDER BY {self.order_by}"
        if self.limit is not None:
            body += f" LIMIT {int(self.limit)}"
        return body

    def select_batch(self) -> str:
        """The SELECT for every run of a connection at once: for each run, the rows :meth:`select` gives it (its
        ``limit`` counted per run), ordered by run, then as :meth:`select` orders them."""
        body = f"SELECT * FROM {self.source}" + (f" WHERE ({self.where})" if self.where else "")
        order = f" ORDER BY {self.order_by}" if self.order_by else ""
        if self.limit is not None:
            body += f" QUALIFY row_number() OVER (PARTITION BY run_id{order}) <= {int(self.limit)}"
        return body + " ORDER BY run_id" + (f", {self.order_by}" if self.order_by else "")


@dataclass(frozen=True)
class Section:
    title: str
    queries: tuple[Query, ...]
    scope: str = "run"
    chart: str | None = None
    table: str | None = None
    columns: tuple[str, ...] = ()
    text: str = ""
    limit: int = 25
    sort: str | None = None  # rows of an "all" section: the column they are ranked by (descending) after the reduce
    options: dict = field(default_factory=dict)
    reduce: str | None = None  # a reducer of traceql.report.reducers: computes tables from the rows of every run

    def query(self, name: str) -> Query:
        return next(q for q in self.queries if q.name == name)


@dataclass(frozen=True)
class Recipe:
    name: str
    title: str
    sections: tuple[Section, ...]
    description: str = ""
    group_by_nvtx: str | None = None
    nvtx_scope: str = "process"  # the launch rule (traceql.launch) that finds the NVTX ranges of group_by_nvtx
    nvtx_domains: tuple[str, ...] = ()
    source: str = ""
    kind: str = "runs"  # runs: `traceql report` maps its queries over runs; diff: they read a diff's tables


def builtin_names() -> list[str]:
    return sorted(p.name.removesuffix(".toml") for p in _builtin_dir().iterdir() if p.name.endswith(".toml"))


def _builtin_dir():
    try:
        return resources.files("traceql.recipes")
    except ModuleNotFoundError:  # a source checkout without the package installed
        return Path(__file__).resolve().parents[2] / "recipes"


def load(name_or_path: str | Path) -> Recipe:
    """A built-in recipe by name (``overlap``, ``kernels``, ``microbench``, ``power``) or a recipe file."""
    text_path = Path(name_or_path)
    if str(name_or_path) in builtin_names():
        res = _builtin_dir() / f"{name_or_path}.toml"
        return parse(res.read_text(), name=str(name_or_path), source=f"built-in recipe {name_or_path}")
    if text_path.suffix == ".toml" or text_path.exists():
        if not text_path.is_file():
            raise MissingInputError(f"recipe {text_path}: no such file (built-in recipes: "
                                    f"{', '.join(builtin_names())})")
        return parse(text_path.read_text(), name=text_path.stem, source=str(text_path))
    raise BadInputError(f"recipe {name_or_path!r}: not a built-in recipe ({', '.join(builtin_names())}) "
                        "nor a .toml file")


def load_kind(name_or_path: str | Path, kind: str) -> Recipe:
    """:func:`load`, refusing a recipe of another kind (a diff recipe for a report over runs, or the reverse)."""
    rec = load(name_or_path)
    if rec.kind != kind:
        use = "traceql diff A B --html OUT --recipe" if rec.kind == "diff" else "traceql report RUNS --recipe"
        raise BadInputError(f"{rec.source}: a recipe of kind {rec.kind!r}, not {kind!r}: use it with `{use} "
                            f"{name_or_path}`")
    return rec


def parse(text: str, *, name: str, source: str, views: set[str] | None = None) -> Recipe:
    """Parse and check a recipe; every mistake is reported with the recipe and section it is in."""
    from .charts import CHARTS

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{source}: not valid TOML: {exc}") from None
    kind = doc.get("kind", "runs")
    if kind not in KINDS:
        raise BadInputError(f"{source}: kind {kind!r}: choose {' or '.join(KINDS)}")
    if views is None and kind == "diff":
        from ..diff_model import DIFF_TABLES

        views = set(DIFF_TABLES)
    if views is None:
        from ..queries_loader import query_files

        views = {n.removesuffix(".sql") for n, _ in query_files() if not n.startswith("_")}
        views |= {"runs", "devices", "processes", "kernels", "memcpy", "memset", "nvtx", "runtime_api",
                  "gpu_metrics", "gpu_metrics_wide", "power", "ncu_metrics", "ncu_kernels"}

    def fail(msg: str) -> BadInputError:
        return BadInputError(f"{source}: {msg}")

    raw_sections = doc.get("section")
    if not isinstance(raw_sections, list) or not raw_sections:
        raise fail("no [[section]] tables; a recipe needs at least one")
    sections = []
    for i, raw in enumerate(raw_sections, 1):
        where = f"section {i} ({raw.get('title', 'untitled')!r})"
        unknown = set(raw) - {"title", "queries", "scope", "chart", "table", "columns", "text", "limit", "sort",
                              "options", "reduce"}
        if unknown:
            raise fail(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        scope = raw.get("scope", "run")
        if scope not in SCOPES:
            raise fail(f"{where}: scope {scope!r}: choose run or all")
        queries = []
        for qname, spec in (raw.get("queries") or {}).items():
            if isinstance(spec, str):
                spec = {"view": spec}
            if not isinstance(spec, dict) or ("view" in spec) == ("sql" in spec):
                raise fail(f"{where}: query {qname!r} needs exactly one of view = \"NAME\" or sql = \"SELECT ...\"")
            view = spec.get("view")
            if view is not None and (not _IDENT.match(view) or view not in views):
                raise fail(f"{where}: query {qname!r}: no view {view!r} (views: {', '.join(sorted(views))})")
            extra = set(spec) - {"view", "sql", "where", "order_by", "limit"}
            if extra:
                raise fail(f"{where}: query {qname!r}: unknown key(s) {', '.join(sorted(extra))}")
            queries.append(Query(qname, view, spec.get("sql"), spec.get("where"), spec.get("order_by"),
                                 spec.get("limit")))
        if not queries:
            raise fail(f"{where}: no queries")
        names = {q.name for q in queries}
        reduce = raw.get("reduce")
        if reduce is not None:
            from .reducers import REDUCERS

            if reduce not in REDUCERS:
                raise fail(f"{where}: no reducer {reduce!r} (reducers: {', '.join(sorted(REDUCERS))})")
            if scope != "all":
                raise fail(f"{where}: reduce {reduce!r} needs scope = \"all\" (it reads the rows of every run)")
            missing = set(REDUCERS[reduce].needs) - names
            if missing:
                raise fail(f"{where}: reducer {reduce!r} needs the queries {', '.join(sorted(missing))}")
            names |= set(REDUCERS[reduce].gives)
        chart = raw.get("chart")
        if chart is not None:
            if chart not in CHARTS:
                raise fail(f"{where}: no chart {chart!r} (charts: {', '.join(sorted(CHARTS))})")
            missing = set(CHARTS[chart].needs) - names
            if missing:
                raise fail(f"{where}: chart {chart!r} needs the queries {', '.join(sorted(missing))}")
        table = raw.get("table")
        if table is not None and table not in names:
            raise fail(f"{where}: table {table!r} is not one of its queries or reduced tables "
                       f"({', '.join(sorted(names))})")
        if chart is None and table is None:
            raise fail(f"{where}: shows nothing: give a chart or a table")
        sections.append(Section(
            title=str(raw.get("title", f"Section {i}")), queries=tuple(queries), scope=scope, chart=chart,
            table=table, columns=tuple(raw.get("columns", ())), text=str(raw.get("text", "")),
            limit=int(raw.get("limit", 25)), sort=raw.get("sort"), options=dict(raw.get("options", {})),
            reduce=reduce))
    return Recipe(name=name, title=str(doc.get("title", name)), sections=tuple(sections),
                  description=str(doc.get("description", "")), group_by_nvtx=doc.get("group_by_nvtx"),
                  nvtx_scope=_nvtx_scope(doc.get("nvtx_scope", "process"), fail),
                  nvtx_domains=tuple(str(d) for d in doc.get("nvtx_domains", ())), source=source, kind=kind)


def _nvtx_scope(scope, fail) -> str:
    from ..launch import SCOPES

    if scope not in SCOPES:
        raise fail(f"nvtx_scope {scope!r}: use one of {', '.join(SCOPES)}")
    return scope
