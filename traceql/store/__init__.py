"""The run store: a directory of ingested traces, and DuckDB views over one or many of them.

Layout::

    RUN_DIR/manifest.json                       an index of the runs it holds (rebuildable from their run.json)
    RUN_DIR/runs/run_id=<run_id>/<table>.parquet   one file per normalized table, empty tables included
    RUN_DIR/runs/run_id=<run_id>/run.json          what the run holds (tables, rows, file sizes); its presence says
                                                   the run is complete

Run folders are named Hive-style (``run_id=...``), so other engines read a table of every run with partition
discovery as well as from the ``run_id`` column every file carries: ``read_parquet('RUN_DIR/runs/*/kernels.parquet',
hive_partitioning = true)`` in DuckDB, ``polars.scan_parquet(..., hive_partitioning=True)``, ``pyarrow.dataset`` with
``partitioning="hive"``. This is layout 4, in which every kernel, copy and set carries its signature id
(``sig``), and GPU metrics are stored wide (a row per GPU and sample time, a column per metric:
:mod:`traceql.store.metrics`); a store of layout 1 (``runs/<run_id>/``), 2 (no ``sig``) or 3 (GPU metrics a row per
sample and metric) is refused with the command that migrates it (:func:`migrate`). Opening a store reads its index,
not every file: a file is checked (its footer: schema version, table, columns) when its size is not the one its run
recorded at ingest.

A run is written in a staging folder and moved into ``runs/`` in one rename, with its ``run.json``, so a crash
mid-ingest leaves no half run. Each writer writes only its own files: the manifest is an index that the process
which ingested (or :func:`reindex`) updates, and a reader also takes the complete runs it does not list yet (a
worker of another host published them) and names, and leaves out, a run folder still being written. A staging
folder ``.tmp-<pid>@<host>~*`` whose process is gone (a killed ingest on this host) is removed by the next ingest
into the same directory; one of another host only when nothing in it changed for an hour.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .. import duck
from ..errors import BadInputError, MissingInputError, SchemaVersionError
from ..output import NO_ROOM, unwritable
from . import digests, schema
from .writer import KERNEL_ORDER, RUN_INFO, RunInfo, finish_run, own_columns, write_streamed

MANIFEST = "manifest.json"
STORE_FORMAT = "traceql-run-store"
# 4: runs/run_id=<run_id>/, file sizes in run.json, signature ids (sig) in kernels, memcpy and memset, GPU metrics
# wide (a row per GPU and sample time); 3: the same with GPU metrics long (a row per sample and metric); 2: nor sig;
# 1: runs/<run_id>/
LAYOUT = 4
LAYOUTS = {1: "runs/<run_id>/", 2: "no signature ids", 3: "GPU metrics stored long"}
RUN_PREFIX = "run_id="


def run_dir(root: Path, run_id: str) -> Path:
    """The folder of run ``run_id`` in the store ``root``."""
    return root / "runs" / f"{RUN_PREFIX}{run_id}"


def run_id_of(folder: str | Path) -> str | None:
    """The run id a run folder's name gives (``run_id=<id>``), None for a folder that is not a run's."""
    name = Path(folder).name
    return name[len(RUN_PREFIX):] if name.startswith(RUN_PREFIX) and len(name) > len(RUN_PREFIX) else None


def is_store(path: Path) -> bool:
    """Whether ``path`` is a run directory: it has an index (a manifest that is not a file is a damaged store, said by
    :func:`read_manifest`), or complete runs whose index was lost."""
    return (path / MANIFEST).exists() or bool(_published(path))


def _published(root: Path) -> list[str]:
    """The run folders of ``root/runs`` that are complete (they have their ``run.json``)."""
    try:
        names = os.listdir(root / "runs")
    except OSError:  # none, not a folder, unreadable
        return []
    return sorted(n for n in names if run_id_of(n) is not None and (root / "runs" / n / RUN_INFO).is_file())


def read_manifest(root: Path, *, quiet: bool = False, shown_as: str | None = None) -> dict:
    """The index of the store ``root``, with the complete runs it does not list yet; a run folder still being written
    is named (unless ``quiet``) and left out. ``shown_as``: how the note names ``root`` (the URL of a store whose
    local copy ``root`` is)."""
    path = root / MANIFEST
    if path.exists() and not path.is_file():
        raise BadInputError(f"{path}: not a file; the run directory is damaged: re-ingest the traces into a new "
                            "directory")
    if not path.is_file():
        if not root.exists():
            raise MissingInputError(f"{root}: no such run directory; create one with `traceql ingest TRACE -o {root}`")
        if published := _published(root):  # the index was lost (a full disk stopped its write): rebuilt from the runs
            manifest = new_manifest()
            _add_unindexed(root, manifest, quiet, shown_as)
            if not quiet and (shown_as or str(root), MANIFEST) not in _noted:
                _noted.add((shown_as or str(root), MANIFEST))
                print(f"traceql: note: {shown_as or root} has no {MANIFEST} (its index); its {len(published)} run(s) "
                      f"are read from their {RUN_INFO}; the next `traceql ingest` into it writes the index again",
                      file=sys.stderr)
            return manifest
        raise BadInputError(f"{root}: not a traceql run directory (no {MANIFEST}); create one with "
                            f"`traceql ingest TRACE -o {root}`")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path}: unreadable manifest ({exc}); re-ingest the traces into a new directory") \
            from exc
    if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
        raise BadInputError(f"{path}: not a traceql manifest; give a run directory made by `traceql ingest`")
    if manifest.get("schema_version") != schema.SCHEMA_VERSION:
        raise SchemaVersionError(f"{path}: run store schema version {manifest.get('schema_version')} is not "
                                 f"supported (this traceql reads {schema.SCHEMA_VERSION}); re-ingest the traces "
                                 "or use a matching traceql")
    if not isinstance(manifest.get("runs"), dict) or not all(isinstance(e, dict) for e in manifest["runs"].values()):
        raise BadInputError(f"{path}: damaged manifest (runs is not a mapping of run ids to entries); re-ingest the "
                            "traces into a new directory")
    layout = manifest.get("layout", 1)
    if layout != LAYOUT:
        if isinstance(layout, int) and layout < LAYOUT:
            what = ("renames each run's folder, records its files and adds" if layout == 1 else "adds")
            raise SchemaVersionError(f"{root}: a run store of layout {layout} ({LAYOUTS.get(layout, 'older')}), which "
                                     f"this traceql reads once migrated: run `traceql migrate {root}` (it {what} "
                                     "each kernel's, copy's and set's signature id; nothing is re-ingested)")
        raise SchemaVersionError(f"{path}: run store layout {layout} is not supported (this traceql reads "
                                 f"{LAYOUT}); use the traceql that wrote it, or a newer one")
    if (root / "runs").exists() and not (root / "runs").is_dir():
        raise BadInputError(f"{root / 'runs'}: not a folder; the run directory is damaged: re-ingest the traces "
                            "into a new directory")
    _add_unindexed(root, manifest, quiet, shown_as)
    return manifest


_noted: set[tuple[str, str]] = set()  # (store, run) whose incomplete state this process reported already


def _add_unindexed(root: Path, manifest: dict, quiet: bool = False, shown_as: str | None = None) -> None:
    """Add the complete runs of ``root/runs`` that the index does not list (published by another process, whose
    index update is still to come or was lost) and report, once, the run folders still being written."""
    try:
        names = os.listdir(root / "runs")
    except FileNotFoundError:
        return
    for name in sorted(set(names) - {f"{RUN_PREFIX}{rid}" for rid in manifest["runs"]}):
        if name.startswith("."):
            continue
        run_id = run_id_of(name)
        entry = read_run_info(root / "runs" / name) if run_id is not None else None
        if entry is not None and entry.get("run_id") == run_id:
            manifest["runs"][run_id] = entry
        elif not quiet and (shown_as or str(root), name) not in _noted:
            _noted.add((shown_as or str(root), name))
            why = (f"is not a run folder (run folders are named {RUN_PREFIX}<run_id>)" if run_id is None else
                   f"is still being written (no {RUN_INFO} yet)" if entry is None else
                   f"holds the {RUN_INFO} of run {entry.get('run_id')} (a copy?)")
            runs = f"{shown_as.rstrip('/')}/runs" if shown_as else root / "runs"
            print(f"traceql: note: {name} in {runs} {why}; it is left out", file=sys.stderr)


def read_run_info(run_dir: Path) -> dict | None:
    """The index entry of the run in ``run_dir``, from its ``run.json``; None while it has none (being written)."""
    try:
        info = json.loads((run_dir / RUN_INFO).read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{run_dir / RUN_INFO}: unreadable ({exc}); remove {run_dir} and ingest its trace "
                            "again") from exc
    return {k: v for k, v in info.items() if k not in ("already", "warnings")}


def new_manifest() -> dict:
    return {"format": STORE_FORMAT, "schema_version": schema.SCHEMA_VERSION, "layout": LAYOUT, "runs": {}}


@contextlib.contextmanager
def locked_manifest(root: Path) -> Iterator[dict]:
    """Read-modify-write the manifest; written atomically on exit.

    The lock only spares processes of one host a lost update (``flock`` is not reliable on network file systems):
    the index is never the only record, since readers also take complete runs it lacks (:func:`read_manifest`).
    """
    root.mkdir(parents=True, exist_ok=True)
    try:
        lock = open(root / ".lock", "w")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise unwritable(root / ".lock", exc) from exc
    with lock:
        with contextlib.suppress(OSError):  # a file system without locks: the index stays rebuildable
            fcntl.flock(lock, fcntl.LOCK_EX)
        # quiet: a writer indexing a run it wrote straight into runs/ would be told of its own run
        manifest = read_manifest(root, quiet=True) if is_store(root) else new_manifest()
        yield manifest
        _write_manifest(root, manifest)


def _write_manifest(root: Path, manifest: dict) -> None:
    """Write the index of ``root`` atomically (a new file renamed over the old one)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".manifest-", suffix=".json")
    except OSError as exc:
        raise unwritable(root, exc) from exc
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600: others sharing the run directory could not read it
        with os.fdopen(fd, "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
        os.replace(tmp, root / MANIFEST)
    except OSError as exc:  # a full disk: the manifest stays as it was
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise unwritable(root / MANIFEST, exc) from exc


def reindex(root: Path, entries: dict[str, dict] | None = None) -> dict:
    """Write the index of ``root``: the entries it lists, every complete run it lacks (from their ``run.json``), and
    ``entries`` (run id -> entry) over those. Returns the manifest."""
    with locked_manifest(root) as manifest:
        manifest["runs"].update(entries or {})
    return manifest


def migrate(root: Path, progress: Callable[[int, int, str], None] | None = None) -> int | None:
    """Bring the store ``root`` from layout 1 (``runs/<run_id>/``), 2 (no signature ids) or 3 (GPU metrics long) to
    this traceql's layout, in place; return the number of runs migrated (None for a store of the current layout).

    Per run: its files are checked (footers); kernels, copies and sets get their signature ids (``sig``, the ids a
    fresh ingest gives: :mod:`traceql.store.signature`) and GPU metrics are turned wide (the rows a fresh ingest
    gives: :mod:`traceql.store.metrics`), a file at a time and streamed; the sizes of its files go into its
    ``run.json``. A run of layout 1 also has a ``runs`` file written before a column existed completed
    (NULL), its kernels put in file order (:data:`traceql.store.writer.KERNEL_ORDER`) and its folder renamed to
    ``run_id=<run_id>`` (one rename: a run is in one layout or the other); it keeps its entry in the index (a run of a
    store written before runs had their own ``run.json`` has no other), completed by its ``run.json``. Each file is
    written beside the old one and renamed over it, and the index is rewritten last; until then readers refuse the
    store with this command, and an interrupted migration is finished by running it again. Nothing is re-ingested;
    the traces are not needed.
    """
    if root.is_file():
        raise BadInputError(f"{root}: a file, not a run directory; give a folder written by `traceql ingest -o` (a "
                            f"trace needs no migration: `traceql ingest {root} -o RUN_DIR` reads it)")
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        read_manifest(root)  # says what is wrong: no such directory, or not a run directory
        raise
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path}: unreadable manifest ({exc}); re-ingest the traces into a new directory") \
            from exc
    if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
        raise BadInputError(f"{path}: not a traceql manifest; give a run directory made by `traceql ingest`")
    if manifest.get("layout", 1) == LAYOUT:
        read_manifest(root, quiet=True)  # the other checks
        return None
    if manifest.get("schema_version") != schema.SCHEMA_VERSION or not isinstance(manifest.get("layout", 1), int) \
            or manifest.get("layout", 1) > LAYOUT:
        read_manifest(root)  # raises: another schema version, or a newer layout
    names = sorted(n for n in (os.listdir(root / "runs") if (root / "runs").is_dir() else []) if not n.startswith("."))
    folders = [n for n in names if run_id_of(n) is None]  # layout 1
    placed = [n for n in names if run_id_of(n) is not None]  # layout 2, 3 or 4
    done = 0

    def described(folder: Path, rid: str) -> dict | None:
        """What the index says of the run in ``folder``, completed by its run.json: layout 1 readers knew a run by
        its index entry (which later writers, as `traceql collect`, added labels to), and a run written by a tool
        other than ingest may have no run.json. None for a run still being written (neither)."""
        entry, own = (manifest.get("runs") or {}).get(rid), read_run_info(folder)
        info = {**(own or {}), **(entry if isinstance(entry, dict) else {})}
        return info if info and info.get("run_id", rid) == rid else None

    def finish(folder: Path, rid: str, info: dict) -> None:
        finish_run(folder, RunInfo(**{"run_id": rid, "source_path": "", "sha256": "", "format": "",
                                      **{k: v for k, v in info.items() if k in RunInfo.__dataclass_fields__}}))

    try:
        for i, name in enumerate(placed):
            folder, rid = root / "runs" / name, run_id_of(name)
            if (info := described(folder, rid)) is None:
                continue
            done += _upgrade(folder, info)
            finish(folder, rid, info)  # sizes recorded again, also where an interrupted migration replaced a file
            if progress is not None:
                progress(i + 1, len(placed) + len(folders), rid)
        for i, name in enumerate(folders, len(placed)):
            old = root / "runs" / name
            if (info := described(old, name)) is None:
                print(f"traceql: note: {old} is not a complete run (no run.json of run {name}); it is left as it is",
                      file=sys.stderr)
                continue
            for table in info.get("tables", {}):
                if (old / f"{table}.parquet").is_file():
                    schema.check_file(old / f"{table}.parquet", table, migrating=True)
            _rewrite(old / "runs.parquet", _added_columns)
            _rewrite(old / "kernels.parquet", lambda t: t.sort_by(KERNEL_ORDER)
                     if t.num_rows and not t.equals(t.sort_by(KERNEL_ORDER)) else None)
            _upgrade(old, info)
            finish(old, name, info)
            old.rename(run_dir(root, name))
            done += 1
            if progress is not None:
                progress(i + 1, len(placed) + len(folders), name)
    except OSError as exc:  # a full disk, a size limit: each file is in its old form or its new one
        raise BadInputError(f"{unwritable(root, exc)}; then run `traceql migrate {root}` again, which goes on where "
                            "this one stopped") from exc
    fresh = new_manifest()
    # the runs of the old index that are in the new layout, with the sizes and rows of their files as migrated (from
    # their run.json), then every other migrated run
    fresh["runs"] = {rid: {**e, **{k: own[k] for k in ("files", "digests", "tables", "repairs", "columns")
                                   if k in own}}
                     for rid, e in (manifest.get("runs") or {}).items()
                     if isinstance(e, dict) and (own := read_run_info(run_dir(root, rid))) is not None}
    _add_unindexed(root, fresh, quiet=True)
    _write_manifest(root, fresh)
    return done


# the tables whose files a migration to this layout rewrites
MIGRATED_TABLES = (*schema.MIGRATED, "gpu_metrics")


def outdated(path: Path, table: str) -> bool:
    """Whether the file ``path`` of ``table`` is of an earlier layout, which a migration rewrites: kernels, copies and
    sets without signature ids, GPU metrics stored long."""
    names = pq.read_schema(path).names
    return "metric" in names if table == "gpu_metrics" else bool(schema.MIGRATED.get(table, set()) - set(names))


def _upgrade(folder: Path, info: dict) -> bool:
    """Bring the files of the run in ``folder`` to this layout, each streamed a row group at a time: signature ids
    (``sig``) added to kernels, copies and sets, GPU metrics turned wide (``info``, the run's record, gets the rows
    and any repairs of that); whether any file changed."""
    from .metrics import write_wide
    from .wide import metric_names

    changed = False
    run_id = run_id_of(folder) or folder.name
    for table in MIGRATED_TABLES:
        f = folder / f"{table}.parquet"
        if not f.is_file() or not outdated(f, table):
            continue
        schema.check_file(f, table, migrating=True)
        source = pq.ParquetFile(f, read_dictionary=["metric"]) if table == "gpu_metrics" else pq.ParquetFile(f)
        run_ids = set()

        def groups(source=source, run_ids=run_ids):
            for group in range(source.num_row_groups):
                rows = source.read_row_group(group)
                run_ids.update(rows.column("run_id").unique().to_pylist())
                yield rows

        tmp = f.with_name(f".{f.name}.migrating")
        try:
            if table == "gpu_metrics":
                names = {n for g in range(source.num_row_groups)
                         for n in source.read_row_group(g, ["metric"]).column("metric").unique().to_pylist()}
                rows, dropped = write_wide(groups(), metric_names(names), run_id, tmp)
                info.setdefault("tables", {})[table] = rows
                info["repairs"] = {**info.get("repairs", {}),
                                   **{f"{table}.{k}": n for k, n in dropped.items() if n}}
            else:
                write_streamed(table, (b for rows in groups() for b in schema.conform(table, rows).to_batches()),
                               run_id, tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if run_ids - {run_id}:  # every row of a run's file is that run's: written otherwise, it is not a traceql run
            tmp.unlink()
            raise BadInputError(f"{f}: holds rows of runs {sorted(run_ids - {run_id})}, not only of run {run_id}; "
                                "re-ingest its trace")
        os.replace(tmp, f)
        changed = True
    return changed


def _added_columns(t: pa.Table) -> pa.Table | None:
    """``t`` with the columns added to its table after it was written (NULL); None when it has them all."""
    table = schema.TABLES["runs"]
    missing = [f for f in table if f.name not in t.column_names and f.name in schema.ADDED_LATER.get("runs", ())]
    for f in missing:
        t = t.append_column(f, pa.nulls(t.num_rows, f.type))
    return t if missing else None


def _rewrite(f: Path, change: Callable[[pa.Table], pa.Table | None]) -> None:
    """Replace the table file ``f`` by ``change`` of its rows (written beside it, then renamed over it); None from
    ``change``: the file stays as it is."""
    import pyarrow.parquet as pq

    if not f.is_file():
        return
    table = f.stem
    new = change(pq.read_table(f))
    if new is None:
        return
    tmp = f.with_name(f".{f.name}.migrating")
    try:
        schema.write(table, new, tmp)  # conformed there
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, f)


STAGING_PREFIX = ".tmp-"
# a staging folder whose process cannot be checked (another host's, or one that names none): removed once nothing in
# it changed for this long (a live ingest writes its files one after the other)
LEGACY_STAGING_AGE_S = 3600
HOST = socket.gethostname().replace("~", "_").replace("/", "_")


def staging_prefix(kind: str = "") -> str:
    """The name prefix of a staging folder of this process (``kind``: what it holds, as ``fetch``): the next ingest on
    this host removes it once the process is gone."""
    return f"{STAGING_PREFIX}{os.getpid()}@{HOST}~" + (f"{kind}-" if kind else "")


def staging_dir(root: Path) -> Path:
    """A fresh folder in ``root`` to write a run into before publishing it, named after this process and host, after
    removing the folders that ingests killed mid-way left behind (their process is gone)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(f"{STAGING_PREFIX}*"):
            if leftover.is_dir() and _abandoned(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
        return Path(tempfile.mkdtemp(dir=root, prefix=staging_prefix()))
    except OSError as exc:
        raise unwritable(root, exc) from exc


@contextlib.contextmanager
def staged_run(root: Path) -> Iterator[Path]:
    """A staging folder in ``root`` to write one run into, then :func:`publish_run`: removed on leaving whatever
    happens (with ``root`` itself, when it was created for this run and nothing was published into it). A write that
    fails for want of room or rights is named as the run directory's; reading a damaged input is bad input already."""
    created = None if root.exists() else root
    tmp = staging_dir(root)
    try:
        yield tmp
    except OSError as exc:
        if exc.errno not in NO_ROOM:
            raise
        raise unwritable(root, exc) from exc
    finally:
        discard(tmp, created)


def discard(staged: Path, created: Path | None = None) -> None:
    """Remove a staging folder whatever became of its run, and ``created`` (a run directory the same ingest made) when
    nothing was published into it: a failed ingest leaves no trace."""
    shutil.rmtree(staged, ignore_errors=True)
    if created is not None:
        with contextlib.suppress(OSError):
            (created / "runs").rmdir()
        with contextlib.suppress(OSError):  # not empty: a run or another ingest's staging folder is in it
            if {p.name for p in created.iterdir()} <= {".lock"}:  # the lock of an index write that failed
                (created / ".lock").unlink(missing_ok=True)
            created.rmdir()


def _untouched_for(folder: Path) -> float:
    try:
        return time.time() - max([folder.stat().st_mtime] + [p.stat().st_mtime for p in folder.iterdir()])
    except OSError:
        return 0.0


def _abandoned(folder: Path) -> bool:
    rest = folder.name[len(STAGING_PREFIX):]
    head, sep, _ = rest.rpartition("~")
    pid_text, _, host = head.partition("@") if sep else (rest.split("-", 1)[0], "", HOST)
    if not pid_text.isdigit() or host != HOST:  # names no process, or one of another host
        return _untouched_for(folder) > LEGACY_STAGING_AGE_S
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def publish_run(root: Path, staged: Path, run_id: str, entry: dict, *, index: bool = True) -> bool:
    """Move a run written in ``staged`` (its ``run.json`` included) to its folder in ``root`` in one rename; with
    ``index``, also list it in the manifest (a worker of a distributed ingest leaves that to the client).

    False when the store holds the run already (a parallel ingest of the same file won the race); ``staged``
    is then left where it is, for the caller to remove.
    """
    final = run_dir(root, run_id)
    final.parent.mkdir(exist_ok=True)
    if (final / RUN_INFO).is_file() or (is_store(root) and run_id in read_manifest(root, quiet=True)["runs"]):
        return False
    if final.exists():  # files of a run that never got its run.json: moved aside in one rename, then removed
        aside = Path(tempfile.mkdtemp(dir=root, prefix=staging_prefix("stale")))
        with contextlib.suppress(FileNotFoundError):
            final.rename(aside / final.name)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        staged.rename(final)
    except OSError:  # another writer published the same run in between
        if (final / RUN_INFO).is_file():
            return False
        raise
    if index:
        try:
            reindex(root, {run_id: entry})
        except BaseException:  # a full disk, Ctrl-C: the run goes back out, so that the store is as it was
            aside = Path(tempfile.mkdtemp(dir=root, prefix=staging_prefix("unpublished")))
            with contextlib.suppress(OSError):
                final.rename(aside / final.name)
            shutil.rmtree(aside, ignore_errors=True)
            raise
    return True


def index_runs(root: Path, run_ids: Collection[str]) -> None:
    """Make the index of ``root`` list ``run_ids``, complete runs of it: rewritten (:func:`reindex`) where it is
    missing or lacks one (an ingest stopped between publishing a run and indexing it), left alone otherwise."""
    try:
        listed = json.loads((root / MANIFEST).read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        listed = {}
    if not set(run_ids) <= set(listed):
        reindex(root)


def run_files(root: Path, table: str, *, nonempty: bool = False) -> list[Path]:
    """The file of ``table`` in each run; a run ingested before the table existed has none (its manifest
    entry lists the tables it holds), and reads as holding no rows of it. ``nonempty``: only the files
    the manifest counts rows in."""
    manifest = read_manifest(root)
    return [run_dir(root, run_id) / f"{table}.parquet" for run_id, info in sorted(manifest["runs"].items())
            if table in info.get("tables", {table: None})
            and not (nonempty and info.get("tables", {}).get(table) == 0)]


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# Reads the tables a lazy ingest left in a run's export into the run (root, run_id) -> its manifest entry: set by
# traceql.ingest, which the store does not import (imports go one way, down)
COMPLETE: Callable[[Path, str], dict] | None = None


def connect(run_dirs: Sequence[str | Path] | str | Path, con: duckdb.DuckDBPyConnection | None = None,
            *, views: bool = True, run_ids: Collection[str] | None = None,
            needs: Collection[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per table over all runs in ``run_dirs`` (rows carry run_id).

    The analysis views of ``queries/`` are created too (``views=False`` skips them). ``run_ids`` keeps only
    those runs (reports map over runs one at a time this way). A run ingested lazily (``traceql ingest --lazy``)
    has its deferred tables read from its export first; ``needs`` names the tables the caller reads, so that
    only those are (the others then read as empty: for callers that know what they query).
    """
    if isinstance(run_dirs, str | Path):
        run_dirs = [run_dirs]
    if not run_dirs:
        raise BadInputError("no run directory given")
    con = con or duck.connect()
    if con.sql("SELECT current_setting('enable_progress_bar')").fetchall()[0][0]:
        with contextlib.suppress(duckdb.InvalidInputException):  # Jupyter without ipywidgets refuses the setting
            con.execute("SET enable_progress_bar = false")
    files: dict[str, list[Path]] = {t: [] for t in schema.TABLES}
    own: dict[Path, tuple[str, ...]] = {}  # a WIDE table's file: its own columns
    partial: set[str] = set()  # tables with a file that lacks a column added after it was written (read as NULL)
    # a run is read once, however many times it is given (the same directory twice, two stores sharing runs):
    # read twice, every kernel would overlap its own copy
    owner: dict[str, Path] = {}
    twice: dict[str, list[Path]] = {}
    unique: list[Path] = []
    for d in map(Path, run_dirs):
        if any(d.resolve() == u.resolve() for u in unique):
            print(f"traceql: note: {d} is given twice; it is read once", file=sys.stderr)
        else:
            unique.append(d)
    for d in unique:
        for rid, entry in sorted(read_manifest(d)["runs"].items()):
            if rid in owner:
                twice.setdefault(rid, [owner[rid]]).append(d)
                continue
            owner[rid] = d
            if run_ids is not None and rid not in run_ids:
                continue
            if entry.get("deferred") and (needs is None or set(entry["deferred"]) & set(needs)):
                entry = _complete(d, rid)
            for table, f, complete, columns in _run_files(d, rid, entry):
                files[table].append(f)
                own[f] = columns
                if not complete:
                    partial.add(table)
    for rid, dirs in twice.items():
        print(f"traceql: note: run {rid} is in {', '.join(map(str, dirs))}; it is read once", file=sys.stderr)
    listed = [(table, p) for table, paths in files.items() for p in paths]  # what lock_files() keeps readable
    con.register("_store_files_arrow", pa.table({"table_name": pa.array([t for t, _ in listed], pa.string()),
                                                 "path": pa.array([str(p) for _, p in listed], pa.string()),
                                                 "columns": pa.array([list(own[p]) for _, p in listed],
                                                                     pa.list_(pa.string()))}))
    con.execute("CREATE OR REPLACE TEMP TABLE _store_files AS SELECT * FROM _store_files_arrow")
    con.unregister("_store_files_arrow")
    for table in files:
        con.register(f"_empty_{table}", schema.empty(table))
    for table, long in schema.LONG.items():  # a table, not a registered object: cursors see it (_metric_wide reads it)
        con.register("_empty_long_arrow", long.empty_table())
        con.execute(f'CREATE OR REPLACE TABLE "_empty_{table}_long" AS SELECT * FROM _empty_long_arrow')
        con.unregister("_empty_long_arrow")
    if views:
        # the analysis views are bound against the tables' empty stand-ins: binding a view over thousands of files
        # (every footer, where a table reads its files by name) would cost more than the views themselves
        for table in files:
            _empty_views(con, table)
        from ..queries_loader import create_views

        create_views(con)
    wide_columns: dict[str, list[str]] = {}  # a WIDE table's own columns, over every run
    for table, paths in files.items():
        if not paths:
            _empty_views(con, table)
            continue
        sources = "[" + ", ".join(_sql_str(str(p)) for p in paths) + "]"
        if table in schema.WIDE:  # the files' own columns differ between runs (GPU metrics' names)
            alike: dict[tuple[str, ...], list[Path]] = {}
            for p in paths:
                alike.setdefault(own[p], []).append(p)
            # one scan per set of columns, which reads its first footer only, and their columns by name
            con.execute(f'CREATE OR REPLACE VIEW "{stored_view(table)}" AS ' + " UNION ALL BY NAME ".join(
                "SELECT * FROM read_parquet([" + ", ".join(_sql_str(str(p)) for p in group) + "])"
                for group in alike.values()))
            wide_columns[table] = list(dict.fromkeys(c for columns in alike for c in columns))  # the view's, in order
            _long_view(con, table, wide_columns[table])
        elif table in partial:  # a file without a column added later (schema.ADDED_LATER): that column reads as NULL
            con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM "_empty_{table}" '
                        f"UNION ALL BY NAME SELECT * FROM read_parquet({sources}, union_by_name = true)")
        else:  # every file has every column (ingest writes them all, migrate adds the later ones): no footer is read
            con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM read_parquet({sources})')
    if views and wide_columns.get("gpu_metrics"):
        from ..queries_loader import metric_projection

        # the attribution's metrics read from their columns
        con.execute(f"CREATE OR REPLACE VIEW _metric_wide AS {metric_projection(con, wide_columns['gpu_metrics'])}")
    return con


def stored_view(table: str) -> str:
    """The view that reads ``table``'s files as they are stored: ``gpu_metrics_wide`` for GPU metrics (whose view
    ``gpu_metrics`` is long), the table's own name for the others."""
    return f"{table}_wide" if table in schema.WIDE else table


def _empty_views(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """``table``'s views over its empty stand-in (no files, or the analysis views being bound)."""
    con.execute(f'CREATE OR REPLACE VIEW "{stored_view(table)}" AS SELECT * FROM "_empty_{table}"')
    if table in schema.LONG:
        con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM "_empty_{table}_long"')


def _long_view(con: duckdb.DuckDBPyConnection, table: str, own: Sequence[str]) -> None:
    """The long view of a WIDE table (a row per key and column of its own, NULLs left out) over its stored view, whose
    own columns are ``own``."""
    wide = stored_view(table)
    keys = schema.TABLES[table].names
    if not own:
        con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM "_empty_{table}_long"')
        return
    long = schema.LONG[table]
    name, value = long.names[len(keys):]
    con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT {", ".join(long.names)} FROM '
                f'(UNPIVOT "{wide}" ON COLUMNS(* EXCLUDE ({", ".join(keys)})) INTO NAME {name} VALUE {value})')


def _complete(root: Path, run_id: str) -> dict:
    if COMPLETE is None:
        raise BadInputError(f"run {run_id} of {root} was ingested lazily; read the rest of it with traceql "
                            f"(`traceql sql {root} 'SELECT 1'`)")
    return COMPLETE(root, run_id)


def _run_files(root: Path, run_id: str, entry: dict) -> Iterator[tuple[str, Path, bool, tuple[str, ...]]]:
    """(table, file, has every column, own columns) of each table run ``run_id`` holds rows of, checked: a file whose
    size is the one the run recorded at ingest is the file ingest wrote (its footer was written by traceql); another
    size, or a run that recorded none, has its footer checked (schema version, table, columns); and a file whose run
    recorded its sha256 must have it (:mod:`traceql.store.digests`, which hashes each state of a file once). Own
    columns: those of a WIDE table's file beyond the declared ones (GPU metrics' names), as the run recorded them, or
    from the footer where it did not (or the size differs); () for the other tables. Empty tables are left out: besides
    costing a read, a view over files of which some are empty misleads DuckDB's join planning (an attribution took
    100x longer with one empty file beside it)."""
    folder = run_dir(root, run_id)
    sizes = entry.get("files") or {}
    sha256s = entry.get("digests") if isinstance(entry.get("digests"), dict) else {}
    for table in schema.TABLES:
        counted = entry.get("tables", {table: None})
        if table not in counted or counted.get(table) == 0:  # ingested before the table existed, or empty
            continue
        f = folder / f"{table}.parquet"
        try:
            st = os.stat(f)
            size = st.st_size
        except FileNotFoundError:
            raise BadInputError(f"{f}: listed in {root / MANIFEST} but missing; re-ingest that trace") from None
        except OSError as exc:
            raise BadInputError(f"{f}: cannot be read ({exc}); re-ingest that trace") from exc
        complete, own = True, ()
        if sizes.get(table) != size:
            schema.check_file(f, table)
            complete = not (set(schema.TABLES[table].names) - set(pq.read_schema(f).names))
        if isinstance(sha256s.get(table), str):  # recorded since traceql wrote sha256s (digests.py)
            digests.check(f, sha256s[table], run_id, st)
        if table in schema.WIDE:
            recorded = entry.get("columns") if isinstance(entry.get("columns"), dict) else {}
            recorded = recorded.get(table)
            if sizes.get(table) == size and isinstance(recorded, list) and all(isinstance(c, str) for c in recorded):
                own = tuple(recorded)
            else:  # not recorded (an earlier traceql), or not as written: the footer says
                own = tuple(own_columns(f, table))
        yield table, f, complete, own


def lock_files(con: duckdb.DuckDBPyConnection) -> None:
    """Close ``con`` to the file system for the SQL that comes next (users' queries).

    The store's tables stay readable: their views become Arrow scans of the same files, which pyarrow opens, not
    DuckDB. Then DuckDB's external access goes off and its configuration is locked, so SQL can no longer read,
    write or list any file (``COPY ... TO``, ``read_text``, ``read_csv``), attach a database or load an extension,
    nor turn the setting back on. Call it after what needs files (:func:`connect`, ``attribution.prepare``).
    """
    import pyarrow.dataset as ds

    rows = con.sql("SELECT table_name, list(path ORDER BY path), flatten(list(columns)) FROM _store_files "
                   "GROUP BY ALL").fetchall()
    for table, paths, columns in rows:
        if table in schema.WIDE:  # the files' columns, as many as they have between them
            table_schema = schema.stored(table, list(dict.fromkeys(columns)))
        else:
            table_schema = schema.TABLES[table]
        con.register(f"_files_{table}", ds.dataset(paths, schema=table_schema, format="parquet"))
        con.execute(f'CREATE OR REPLACE VIEW "{stored_view(table)}" AS SELECT * FROM "_files_{table}"')
    duck.lock_kept_files(con)  # the tables attribution.prepare wrote to files
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
