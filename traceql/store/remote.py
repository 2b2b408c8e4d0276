"""Run stores at a URL: ``memory://``, ``s3://``, ``gs://``... (any fsspec protocol but ``file://``, which is a path).

Writing (``traceql ingest TRACES -o URL``): each unit of work ingests its trace into a local staging store, exactly
as into a local run directory (:func:`staged`: a temporary folder holding a copy of the URL's index, so that a trace
the store holds already is known as such and nothing is written), then uploads the run's files to
``URL/runs/run_id=<id>/``, each whole, its ``run.json`` last (:func:`upload_run`): a run folder with its ``run.json`` is
complete, the local store's rule, so no reader takes a run whose upload was interrupted. Once the units are done, the
client writes the index, ``URL/manifest.json``, in one put of the whole object (:func:`write_index`; object stores
have no rename, but replace a whole object at once). Each writer writes only its own files; two clients ingesting into
one URL at the same time may lose each other's index entries, never a run, since readers also take the complete runs
that the index does not list.

Reading (:func:`connect`, and the commands through :func:`opened`): the index and the files of the runs are
downloaded into a temporary folder, opened as a local run directory, and removed afterwards (when the command ends; for
:func:`connect`, when its connection is garbage-collected). Run folders still being uploaded (no ``run.json``) are
named and left out, as in a local store. Why a copy rather than DuckDB reading the URL through a registered fsspec
file system: docs/scale.md ("Inputs and outputs by URL").
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import weakref
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import duckdb

from ..errors import BadInputError, TraceqlError
from ..sources import urls
from . import MANIFEST, RUN_INFO, RUN_PREFIX, new_manifest, read_manifest, run_dir, run_id_of
from . import connect as connect_local

is_remote = urls.is_remote


class _Remote:
    """A run store at a URL: its file system and its root's path on it."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.fs, root = urls.filesystem(url)
        self.root = root.rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def name(self, *parts: str) -> str:
        return "/".join([self.url, *parts])

    def fresh(self, *parts: str) -> str:
        """The path of ``parts``, whose listing fsspec may have cached (s3fs does): forgotten, to be read again."""
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(self.path(*parts))
        return self.path(*parts)


def _calling(remote: _Remote, fn, *args, what: str | None = None, doing: str = "read"):
    """``fn(*args)`` on the remote file system; FileNotFoundError as it is, any other failure as bad input."""
    try:
        return fn(*args)
    except (TraceqlError, FileNotFoundError):
        raise
    except Exception as exc:  # the file system's package has errors of its own (botocore's, google's...)
        raise urls.failure(what or remote.url, exc, doing) from None


def _renamed(exc: TraceqlError, local: Path, url: str) -> TraceqlError:
    """``exc`` naming ``url`` where it names ``local`` (the local copy of the store at ``url``)."""
    return type(exc)(str(exc).replace(str(local), url))


def _index(remote: _Remote, mirror: Path, *, missing_ok: bool, quiet: bool) -> tuple[dict, bool]:
    """The index of the store at ``remote``, read as :func:`traceql.store.read_manifest` reads a local one (checked;
    complete runs it does not list added; run folders still being uploaded named, unless ``quiet``, and left out),
    through ``mirror``, a local folder that gets its ``manifest.json``. ``missing_ok``: no store there yet is an empty
    index. Also whether the stored index lacks some of it (absent, or missing complete runs)."""
    try:
        raw = _calling(remote, remote.fs.cat_file, remote.path(MANIFEST), what=remote.name(MANIFEST))
    except FileNotFoundError:
        raw = None
    try:
        folders = [p.rstrip("/").rsplit("/", 1)[-1]
                   for p in _calling(remote, remote.fs.ls, remote.fresh("runs"), False)]
    except FileNotFoundError:
        folders = []
    if raw is None and not folders and _calling(remote, remote.fs.isfile, remote.root):
        raise BadInputError(f"{remote.url}: a file, not a run directory; " + (
            "give a folder to write the run directory into" if missing_ok else
            f"if it is a trace, ingest it first (`traceql ingest {remote.url} -o RUN_DIR`) and give RUN_DIR"))
    if raw is not None or folders or missing_ok or _calling(remote, remote.fs.exists, remote.root):
        mirror.mkdir(parents=True, exist_ok=True)
    if raw is not None:
        (mirror / MANIFEST).write_bytes(raw)
    elif missing_ok:
        (mirror / MANIFEST).write_text(json.dumps(new_manifest()))
    try:
        listed = read_manifest(mirror, quiet=True)["runs"]  # checked: a traceql index of this layout
        unlisted = [n for n in folders if not n.startswith(".") and n.removeprefix(RUN_PREFIX) not in listed]
        for name in unlisted:  # their run.json says whether they are complete
            (mirror / "runs" / name).mkdir(parents=True, exist_ok=True)
            if run_id_of(name) is not None:
                with contextlib.suppress(FileNotFoundError):
                    _calling(remote, remote.fs.get_file, remote.path("runs", name, RUN_INFO),
                             str(mirror / "runs" / name / RUN_INFO), what=remote.name("runs", name, RUN_INFO))
        manifest = read_manifest(mirror, quiet=quiet, shown_as=remote.url)
    except TraceqlError as exc:
        raise _renamed(exc, mirror, remote.url) from None
    for name in unlisted:  # the run folders were only needed for their run.json
        shutil.rmtree(mirror / "runs" / name, ignore_errors=True)
    stale = raw is None or any(rid not in listed for rid in manifest["runs"])
    return manifest, stale


def _download(remote: _Remote, mirror: Path, manifest: dict, run_ids: Collection[str] | None) -> None:
    """The files of the runs in ``manifest`` (those of ``run_ids``), from the store at ``remote`` into ``mirror``; a
    file the index lists but the store lacks stays missing, for the reader to name."""
    remote_paths, local_paths = [], []
    for rid, entry in sorted(manifest["runs"].items()):
        if run_ids is not None and rid not in run_ids:
            continue
        folder = f"{RUN_PREFIX}{rid}"
        names = [f"{table}.parquet" for table in entry.get("tables", {})] + [RUN_INFO]
        run_dir(mirror, rid).mkdir(parents=True, exist_ok=True)
        remote_paths += [remote.path("runs", folder, n) for n in names]
        local_paths += [str(run_dir(mirror, rid) / n) for n in names]
    try:
        _calling(remote, remote.fs.get, remote_paths, local_paths)  # in one call: concurrent where fsspec can
    except FileNotFoundError:
        for r, loc in zip(remote_paths, local_paths, strict=True):
            if not Path(loc).is_file():
                with contextlib.suppress(FileNotFoundError):
                    _calling(remote, remote.fs.get_file, r, loc)
    with (mirror / MANIFEST).open("w") as f:  # the index the copy holds: the runs taken, those not listed included
        json.dump(manifest, f, indent=2, sort_keys=True)


def download(url: str, dest: Path, run_ids: Collection[str] | None = None) -> Path:
    """Copy the store at ``url`` (its index and the files of its complete runs; those of ``run_ids`` only, if given)
    into the new folder ``dest``, a local run directory; errors name the URL."""
    remote = _Remote(url)
    manifest, _ = _index(remote, dest, missing_ok=False, quiet=False)
    _download(remote, dest, manifest, run_ids)
    return dest


@contextlib.contextmanager
def opened(inputs: Sequence[str | Path], what: str = "input") -> Iterator[list[Path]]:
    """The inputs as paths: a run store at a URL downloaded into a temporary folder (removed on leaving), a
    ``file://`` URL as its path, a path as it is. Errors raised inside name the URL, not its copy."""
    if not any(is_remote(i) for i in inputs):
        yield [urls.as_local(i, what) for i in inputs]
        return
    with tempfile.TemporaryDirectory(prefix="traceql-url-") as tmp:
        copies: dict[str, Path] = {}
        paths = []
        for item in inputs:
            if not is_remote(item):
                paths.append(urls.as_local(item, what))
                continue
            url = str(item).rstrip("/")
            if url not in copies:  # the same URL twice is read once (connect says so of a path given twice)
                copies[url] = download(url, Path(tmp) / f"store{len(copies)}")
            paths.append(copies[url])
        try:
            yield paths
        except TraceqlError as exc:
            for url, local in copies.items():
                exc = _renamed(exc, local, url)
            raise exc from None


def connect(run_dirs: Sequence[str | Path] | str | Path, con: duckdb.DuckDBPyConnection | None = None,
            *, views: bool = True, run_ids: Collection[str] | None = None) -> duckdb.DuckDBPyConnection:
    """:func:`traceql.store.connect` over run directories that may be URLs: a store at a URL is downloaded (the runs
    of ``run_ids``, if given) into a temporary folder that is removed when the connection is garbage-collected."""
    dirs = [run_dirs] if isinstance(run_dirs, str | Path) else list(run_dirs)
    if not any(is_remote(d) for d in dirs):
        return connect_local([urls.as_local(d, "a run directory") for d in dirs], con, views=views,
                             run_ids=run_ids)
    tmp = tempfile.TemporaryDirectory(prefix="traceql-url-")
    try:
        copies: dict[str, Path] = {}
        local = []
        for d in dirs:
            if is_remote(d):
                url = str(d).rstrip("/")
                if url not in copies:
                    copies[url] = download(url, Path(tmp.name) / f"store{len(copies)}", run_ids)
                local.append(copies[url])
            else:
                local.append(urls.as_local(d, "a run directory"))
        try:
            con = connect_local(local, con, views=views, run_ids=run_ids)
        except TraceqlError as exc:
            for url, path in copies.items():
                exc = _renamed(exc, path, url)
            raise exc from None
    except BaseException:
        tmp.cleanup()
        raise
    weakref.finalize(con, tmp.cleanup)  # the views read the copy for as long as the connection lives
    return con


@contextlib.contextmanager
def staged(url: str) -> Iterator[Path]:
    """A local run directory to ingest into for the store at ``url``: it holds the URL's index (so a trace that the
    store holds already is found there) and no run; removed on leaving. Errors name the URL."""
    remote = _Remote(url)
    with tempfile.TemporaryDirectory(prefix="traceql-upload-") as tmp:
        mirror = Path(tmp) / "store"
        _index(remote, mirror, missing_ok=True, quiet=True)
        try:
            yield mirror
        except TraceqlError as exc:
            raise _renamed(exc, mirror, remote.url) from None


def upload_run(url: str, local: Path, run_id: str) -> bool:
    """Upload run ``run_id`` of the local run directory ``local`` to the store at ``url``: each file whole, its
    ``run.json`` last (the run is complete once it is there). False when the store holds the run already (another
    unit uploaded the same trace); the files of an upload that was interrupted are replaced."""
    remote = _Remote(url)
    folder = f"{RUN_PREFIX}{run_id}"
    remote.fresh("runs", folder)
    if _calling(remote, remote.fs.exists, remote.path("runs", folder, RUN_INFO)):
        return False
    files = sorted(p for p in run_dir(local, run_id).iterdir() if p.name != RUN_INFO)
    urls.upload([*files, run_dir(local, run_id) / RUN_INFO], remote.name("runs", folder))
    return True


def write_index(url: str, entries: dict[str, dict]) -> dict:
    """Write the index of the store at ``url`` (one put of the whole object): the runs it lists, the complete runs
    it lacks, and ``entries`` (run id -> entry). Nothing is written when it lists them all already. Returns it."""
    remote = _Remote(url)
    with tempfile.TemporaryDirectory(prefix="traceql-index-") as tmp:
        manifest, stale = _index(remote, Path(tmp) / "store", missing_ok=True, quiet=True)
    if stale or any(manifest["runs"].get(rid) != entry for rid, entry in entries.items()):
        manifest["runs"].update(entries)
        text = json.dumps(manifest, indent=2, sort_keys=True)
        _calling(remote, remote.fs.makedirs, remote.root, True, what=remote.url, doing="written")
        _calling(remote, remote.fs.pipe_file, remote.path(MANIFEST), text.encode(), what=remote.name(MANIFEST),
                 doing="written")
    return manifest


def migrate(url: str, progress=None) -> int | None:
    """:func:`traceql.store.migrate` for a store at a URL, from layout 2 or 3: each run's kernels, copies and sets
    (layout 2) and GPU metrics are downloaded, migrated (signature ids, GPU metrics wide) and uploaded over the old
    ones (each object whole), then the run's ``run.json`` with the new sizes, and the index last, as a local migration
    goes. The other tables' files, which a migration leaves as they are, are not downloaded. A store of layout 1 is
    refused: its runs' folders are renamed by a migration, and object stores have no rename. Errors name the URL."""
    from . import MIGRATED_TABLES, outdated
    from . import migrate as migrate_local

    remote = _Remote(url)
    with tempfile.TemporaryDirectory(prefix="traceql-migrate-") as tmp:
        mirror = Path(tmp) / "store"
        mirror.mkdir()
        try:
            raw = _calling(remote, remote.fs.cat_file, remote.path(MANIFEST), what=remote.name(MANIFEST))
        except FileNotFoundError:
            raise BadInputError(f"{remote.url}: no run store here (no {MANIFEST}); give the URL a run store was "
                                "ingested to") from None
        (mirror / MANIFEST).write_bytes(raw)
        try:
            layout = json.loads(raw).get("layout", 1)
        except (ValueError, AttributeError):
            layout = None  # the local migration names what is wrong with the index
        if layout == 1:
            raise BadInputError(f"{remote.url}: a run store of layout 1, whose migration renames each run's folder, "
                                "which object stores cannot: download it, run `traceql migrate` on the copy, and "
                                "upload the copy to a new URL")
        try:
            folders = [p.rstrip("/").rsplit("/", 1)[-1] for p in _calling(remote, remote.fs.ls, remote.fresh("runs"),
                                                                           False)]
        except FileNotFoundError:
            folders = []
        lacking: dict[str, list[str]] = {}  # the files of each run that the migration rewrites
        if layout in (2, 3):  # else the local migration says from the index alone that it is current, or what is wrong
            for name in folders:
                if (rid := run_id_of(name)) is None:
                    continue
                local = mirror / "runs" / name
                local.mkdir(parents=True)
                # run.json with the sizes of every file: the local migration records those of the files it has, and
                # keeps the others' (writer.finish_run)
                with contextlib.suppress(FileNotFoundError):
                    _calling(remote, remote.fs.get_file, remote.path("runs", name, RUN_INFO), str(local / RUN_INFO),
                             what=remote.name("runs", name, RUN_INFO))
                for table in MIGRATED_TABLES if layout == 2 else ("gpu_metrics",):  # what layout 3 lacks
                    with contextlib.suppress(FileNotFoundError):
                        _calling(remote, remote.fs.get_file, remote.path("runs", name, f"{table}.parquet"),
                                 str(local / f"{table}.parquet"), what=remote.name("runs", name, f"{table}.parquet"))
                lacking[rid] = [t for t in MIGRATED_TABLES if (local / f"{t}.parquet").is_file()
                                and outdated(local / f"{t}.parquet", t)]
        try:
            done = migrate_local(mirror, progress)
        except TraceqlError as exc:
            raise _renamed(exc, mirror, remote.url) from None
        if done is None:
            return None
        for rid, files in lacking.items():
            folder = run_dir(mirror, rid)
            if (folder / RUN_INFO).is_file():  # a run the local migration took (not one still being uploaded)
                urls.upload([*(folder / f"{t}.parquet" for t in files), folder / RUN_INFO],
                            remote.name("runs", f"{RUN_PREFIX}{rid}"))
        _calling(remote, remote.fs.pipe_file, remote.path(MANIFEST), (mirror / MANIFEST).read_bytes(),
                 what=remote.name(MANIFEST), doing="written")
    return done
