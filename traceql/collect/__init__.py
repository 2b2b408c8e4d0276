"""``traceql collect -- CMD``: run a program under nsys (or ncu) with flags that fit, then ingest it.

The ``.nsys-rep`` is kept as the archive under ``OUT/reports/``; the run joins the run store
``OUT``. The program runs in its own process group: on Ctrl-C, a ``--timeout`` or a crash, the
whole group is ended, whatever report nsys wrote is kept, and traceql says what it kept.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .. import store
from ..errors import BadInputError, NsysNotFoundError, TraceqlError, UsageError
from ..output import check_folder
from ..sources.ncu.derive import FLOP_OPS, SASS_COUNT
from ..sources.nsys.locate import INSTALL_GLOBS, candidates, expected_host_dir, find_importer, find_nsys, nsys_version
from . import proctree

ENV_RECORDED = re.compile(r"^(NCCL_|CUDA_|TORCH_|NVSHMEM_|OMP_NUM_THREADS$|WORLD_SIZE$|LOCAL_WORLD_SIZE$|MASTER_"
                          r"|RANK$|LOCAL_RANK$|SLURM_(JOB_ID|PROCID|NODEID|NNODES)$)")
TOO_OLD = "Unknown runtime API function"
EXIT_TIMEOUT = 124  # as coreutils timeout(1)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
# Nsight Compute preset: the sections traceql.sources.ncu derives its columns from, plus by name the metrics attribution
# needs most and the SASS floating-point counters that FLOP counts come from (see traceql/ncu/derive.py).
NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis")
NCU_METRICS = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
               "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
               "launch__occupancy_limit_blocks", "launch__waves_per_multiprocessor",
               *(SASS_COUNT.format(op=op) for op in FLOP_OPS))
NCU_CLOCK_CONTROLS = ("none", "base", "reset")
# Never profiled: collectives (and kernels that wait on peers) hang under kernel replay, which replays one
# rank's kernel while its peers wait elsewhere. Prefixes of function names, then substrings anywhere.
NCU_EXCLUDE = (r"^(?!(?:nccl|rccl|nvshmem|mscclpp)"
               r"|.*(?:symm_?mem|symmetric_mem|multimem|deep_?ep|cross_device_reduce|all_?reduce))")


class ProgramFailedError(TraceqlError, RuntimeError):
    """The profiled program exited non-zero; ``exit_code`` is its code."""


@dataclass
class Collection:
    report: Path | None
    run_id: str | None
    exit_code: int
    messages: list[str] = field(default_factory=list)


def gpus_present() -> bool:
    """Whether an NVIDIA GPU is usable here: ``nvidia-smi -L`` runs, succeeds and lists one. The one place that
    decides it: nvidia-smi may exist without a driver it can reach (a container without GPUs, a CPU node with
    nvidia-utils, a driver/library mismatch after an upgrade), and then it prints an error, not GPUs."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, errors="replace", timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(line.startswith("GPU ") for line in out.stdout.splitlines())


def nsys_flags(version: tuple[int, ...], gpu_metrics: bool, have_gpu: bool,
               user_args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Flags that fit this nsys: CUDA + NVTX + OS runtime, graph nodes, CUDA events, GPU metrics on the GPUs in use.

    An option that ``user_args`` (``--nsys-args``) sets replaces traceql's: nsys refuses an option given twice.
    """
    groups = [(("-t", "--trace"), ["-t", "cuda,nvtx,osrt" if have_gpu else "nvtx,osrt"]),
              (("-s", "--sample"), ["-s", "none"]),
              (("--cpuctxsw",), ["--cpuctxsw=none"]),
              (("-f", "--force-overwrite"), ["--force-overwrite=true"]),
              # nsys would wait for processes the program left behind (a daemon it forked) however long they run;
              # traceql ends them once the program is done and says so
              (("--wait",), ["--wait=primary"])]
    if have_gpu and version >= (2023, 3):
        groups.append((("--cuda-graph-trace",), ["--cuda-graph-trace=node"]))
    if have_gpu and version >= (2025, 1):
        # the event records and stream waits between streams (CUDA_EVENT, SYNCHRONIZATION: stream_waits), without
        # which a kernel held back from starting cannot be told from one that waited for another stream (checked
        # with nsys 2025.3; earlier versions are not asked)
        groups.append((("--cuda-event-trace",), ["--cuda-event-trace=true"]))
    if gpu_metrics:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        devices = visible if visible and all(p.strip().isdigit() for p in visible.split(",")) else "all"
        # 2023.2 renamed the singular option; both take a list or "all"
        option = "--gpu-metrics-devices" if version >= (2023, 2) else "--gpu-metrics-device"
        groups.append((("--gpu-metrics-devices", "--gpu-metrics-device"), [f"{option}={devices}"]))
    given = {a.split("=", 1)[0] for a in user_args if a.startswith("-")}
    return [tok for names, toks in groups if not given & set(names) for tok in toks]


def environment_labels(cmd: list[str]) -> dict[str, str]:
    labels = {"command": shlex.join(cmd), "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    labels.update({f"env.{k}": v for k, v in sorted(os.environ.items()) if ENV_RECORDED.match(k)})
    for pkg in ("torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "jax"):
        try:
            labels[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    if (smi := shutil.which("nvidia-smi")) and gpus_present():
        try:
            done = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                                  capture_output=True, text=True, errors="replace", timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        lines = done.stdout.splitlines() if done is not None and done.returncode == 0 else []
        rows = [(d.strip(), n.strip()) for d, sep, n in (line.partition(",") for line in lines) if sep]
        if rows:
            labels["driver"] = rows[0][0]
            labels["gpus"] = ";".join(n for _, n in rows)
    return labels


def _run_group(cmd: list[str], timeout: float | None, log) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own session; on Ctrl-C or timeout end it and all it started, letting it finish its report."""
    outcome = proctree.run(cmd, timeout, log)
    return outcome.returncode, outcome.tail, outcome.ended_by is not None


def _find_nsys() -> str:
    """nsys, as :func:`find_nsys` finds it; but a TRACEQL_NSYS that names no executable is an error, not skipped."""
    env = os.environ.get("TRACEQL_NSYS")
    if env and not (os.path.isfile(env) and os.access(env, os.X_OK)):
        others = [c for c in candidates()[1:] if os.path.isfile(c) and os.access(c, os.X_OK)]
        where = f"looked there first, then on PATH and in {', '.join(INSTALL_GLOBS)}: "
        where += f"found {others[0]}, used once TRACEQL_NSYS is unset" if others else "no nsys there either"
        raise NsysNotFoundError(f"TRACEQL_NSYS={env} is not an executable file ({where}); set TRACEQL_NSYS to "
                                "an nsys executable, e.g. /opt/nvidia/nsight-systems/VERSION/bin/nsys, or unset it")
    return find_nsys()


def _check_program(cmd: list[str]) -> None:
    prog = cmd[0]
    if os.sep in prog:
        path = Path(prog)
        if not path.exists():
            raise BadInputError(f"{prog}: no such file; check the program after `--`")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise BadInputError(f"{prog}: not an executable file; run it through its interpreter "
                                f"(`traceql collect -- python3 {prog}`) or make it executable")
    elif shutil.which(prog) is None:
        raise BadInputError(f"{prog}: command not found on PATH; check the program after `--`")


def report_name(name: str) -> str:
    """``--name`` with nsys' output patterns expanded here, so that traceql knows the report's file name.

    ``%q{VAR}`` becomes the environment variable (``rank%q{SLURM_PROCID}`` under srun), ``%h`` the host
    name, ``%%`` a percent sign. ``%p`` (the program's pid, known only once nsys started it) is refused.
    """
    def one(m: re.Match) -> str:
        if m.group(0) == "%%":
            return "%"
        if m.group(0) == "%h":
            return socket.gethostname()
        if m.group(1) is not None:
            if m.group(1) not in os.environ:
                raise UsageError(f"--name {name}: %q{{{m.group(1)}}} names a variable that is not set here")
            return os.environ[m.group(1)]
        raise UsageError(f"--name {name}: {m.group(0)} is not supported; use %q{{VAR}} (e.g. %q{{RANK}}), %h or %%")

    expanded = re.sub(r"%q\{(\w+)\}|%.", one, name)
    if not expanded or "/" in expanded or expanded in (".", ".."):
        raise UsageError(f"--name {name!r}: give a file name (the folder is -o/--out)")
    return expanded


def collect(cmd: list[str], out: str | Path = "traceql-runs", *, name: str | None = None,
            gpu_metrics: bool | None = None, power: bool = False, ncu: bool = False, nsys_args: list[str] | None = None,
            timeout: float | None = None, labels: dict[str, str] | None = None, kernels_regex: str | None = None,
            nvtx_include: str | None = None, clock_control: str = "none", ncu_args: list[str] | None = None,
            log=print, step: Callable[[str], AbstractContextManager] | None = None) -> Collection:
    """Profile ``cmd`` and ingest the result into the run store ``out``.

    ``gpu_metrics``: sample GPU metrics; ``None`` (the default) samples them where a GPU is found and says so
    where none is. ``step(text)``: a context manager around the export and ingest of the report (a progress
    display). The exit code is the program's (through nsys); 124 when ``timeout`` ended it, 130 on Ctrl-C.
    """
    if not cmd:
        raise UsageError("give the program to profile after --: traceql collect -- python train.py")
    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout {timeout:g}: give a positive number of seconds")
    _check_program(cmd)
    check_folder(Path(out) / "reports")  # before the program runs, not after
    if {a.split("=", 1)[0] for a in nsys_args or ()} & {"-o", "--output"}:
        raise UsageError("--nsys-args must not set -o/--output: traceql names the report (use --name and --out)")
    have_gpu = gpus_present()
    metrics_note = None
    if gpu_metrics is None and not ncu:  # the attribution depends on them: on wherever they can be sampled
        gpu_metrics = have_gpu
        if not have_gpu:
            metrics_note = "GPU metrics not sampled: no NVIDIA GPU found (nvidia-smi -L lists none)"
    if (gpu_metrics or power or ncu) and not have_gpu:
        what = "--gpu-metrics" if gpu_metrics else "--power" if power else "--ncu"
        raise BadInputError(f"{what} needs an NVIDIA GPU, and none was found (nvidia-smi -L lists none); "
                            f"run without {what} to collect CPU and NVTX activity only")
    if power and importlib.util.find_spec("pynvml") is None:
        raise BadInputError("--power samples through NVML's Python bindings, which are not installed: "
                            "pip install nvidia-ml-py")
    name = report_name(name) if name else dt.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    out = Path(out)
    reports = out / "reports"
    if ncu:
        reports.mkdir(parents=True, exist_ok=True)
        return _collect_ncu(cmd, reports / name, timeout, kernels_regex, nvtx_include, clock_control, log,
                            labels=labels, ncu_args=ncu_args)
    nsys = _find_nsys()
    version = nsys_version(nsys)
    flags = nsys_flags(version, gpu_metrics, have_gpu, nsys_args or ())
    all_labels = {**environment_labels(cmd), **(labels or {}), "name": name, "nsys": ".".join(map(str, version))}
    reports.mkdir(parents=True, exist_ok=True)
    base = reports / name
    full = [nsys, "profile", *flags, *(nsys_args or []), "-o", str(base).replace("%", "%%"), *cmd]  # expanded already
    log("traceql: " + shlex.join(full))
    if not have_gpu:
        log("traceql: no NVIDIA GPU found: collecting CPU, OS runtime and NVTX activity only")
    if metrics_note:
        log(f"traceql: {metrics_note}")
    sampler = None
    power_file = reports / f"{name}.power.parquet"
    if power:
        # --parent: the sampler ends itself if this process is killed before it can stop it
        sampler = subprocess.Popen([sys.executable, "-m", "traceql.collect.power", str(power_file),
                                    "--parent", str(os.getpid())], start_new_session=True)
    try:
        outcome = proctree.run(full, timeout, log)
    finally:
        if sampler is not None:
            sampler.send_signal(signal.SIGTERM)
            try:
                sampler.wait(60)
            except subprocess.TimeoutExpired:
                sampler.kill()
    rc, ended_by = outcome.returncode, outcome.ended_by
    code = {"timeout": EXIT_TIMEOUT, "interrupt": EXIT_INTERRUPTED}.get(ended_by, rc)
    report = _named(base, ".nsys-rep")
    messages = []
    if outcome.leftovers:
        messages.append(f"ended {len(outcome.leftovers)} process(es) still running after nsys exited (pids "
                        + ", ".join(map(str, outcome.leftovers)) + ")")
    if power and not power_file.exists():
        messages.append(f"the NVML power sampler wrote no {power_file}: the run has no power samples")
    if TOO_OLD in outcome.tail:
        raise BadInputError(f"{nsys} ({'.'.join(map(str, version))}) is too old to trace this program's CUDA "
                            f"(\"{TOO_OLD}\"); install a newer Nsight Systems and point TRACEQL_NSYS at it")
    if not report.exists() and _named(base, ".qdstrm").exists():
        import_qdstrm(nsys, _named(base, ".qdstrm"), report, log)
    if not report.exists():
        partial = sorted(reports.glob(f"{name}*.qdstrm"))
        hint = f"; the raw collection was kept as {partial[0]}" if partial else ""
        raise BadInputError(f"nsys wrote no report (exit code {rc}){hint}; see its output above")
    if ended_by == "timeout":
        messages.append(f"--timeout of {timeout:g} s ended the program; the partial report was kept as {report}")
    elif ended_by == "interrupt":
        messages.append(f"interrupted; the partial report was kept as {report}")
    elif rc != 0:
        messages.append(f"the program exited with code {rc}; its report was kept as {report}")
    from ..ingest import ingest_one

    try:
        with (step or _no_step)(f"exporting and ingesting {report.name}"):
            info = ingest_one(report, out, require_kernels=False, labels=all_labels,
                              power_file=power_file if power and power_file.exists() else None)
    except BadInputError as exc:
        if code == 0:
            raise
        messages.append(f"nothing to ingest: {exc}")
        return Collection(report, None, code, messages)
    if not info.already:
        with store.locked_manifest(out) as manifest:  # the labels are in runs.labels_json too; here without SQL
            manifest["runs"][info.run_id]["labels"] = all_labels
    messages.append(f"run {info.run_id} in {out} ({info.tables.get('kernels', 0)} kernels, "
                    f"{info.tables.get('nvtx', 0)} NVTX events)")
    if gpu_metrics and not info.already and not info.tables.get("gpu_metrics"):
        messages.append("GPU metrics were asked for but the report holds none: this GPU or nsys cannot sample them, "
                        "or the driver keeps GPU performance counters to administrators (see docs/collect.md); the "
                        "attribution runs without them")
    for warning in info.warnings:
        messages.append(f"warning: {warning}")
    return Collection(report, info.run_id, code, messages)


def _named(base: Path, extension: str) -> Path:
    """The file nsys or ncu writes for ``-o base``: the extension added to the whole name, as they add it (a name
    with a dot, ``lr0.1``, gives ``lr0.1.nsys-rep``, where ``with_suffix`` would look for ``lr0.nsys-rep``)."""
    return base.with_name(base.name + extension)


def import_qdstrm(nsys: str, qdstrm: Path, report: Path, log=print) -> None:
    """Turn the raw collection ``qdstrm`` into ``report`` with the installation's QdstrmImporter, as nsys does when it
    finds its importer (Debian's nsight-systems package ships it where its nsys does not look); the ``.qdstrm`` is
    removed once the report is written. No importer, or one that fails, is an error that says what to do."""
    importer = find_importer(nsys)
    expected = expected_host_dir(nsys)
    by_hand = f"import it by hand (`QdstrmImporter -i {qdstrm}`) and ingest the .nsys-rep"
    if importer is None:
        raise BadInputError(
            f"nsys left the raw collection {qdstrm} and no report: it looks for its importer in {expected}/"
            f"QdstrmImporter, which is missing, and no QdstrmImporter was found in the installation of {nsys} "
            f"(resolved to {os.path.realpath(nsys)}). Add the link, e.g. for Debian's nsight-systems package "
            f"`sudo ln -s /usr/lib/nsight-systems/host-linux-x64 {expected}` (the folder that holds QdstrmImporter), "
            f"or {by_hand}")
    log(f"traceql: nsys did not find its importer ({expected}/QdstrmImporter); importing {qdstrm.name} with "
        f"{importer}")
    cmd = [str(importer), "-i", str(qdstrm), "-o", str(report), "-f"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=1800,
                              start_new_session=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInputError(f"{importer} could not import {qdstrm} ({exc}); the raw collection was kept: "
                            f"{by_hand}") from None
    if done.returncode != 0 or not report.exists():
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        detail = "".join(c if c.isprintable() else "?" for c in (lines[-1] if lines else ""))[:300]
        report.unlink(missing_ok=True)
        raise BadInputError(f"{importer} failed to import {qdstrm} (exit code {done.returncode}"
                            f"{': ' + detail if detail else ''}); the raw collection was kept: {by_hand}")
    qdstrm.unlink(missing_ok=True)


@contextlib.contextmanager
def _no_step(_what: str) -> Iterator[None]:
    yield


def find_ncu() -> str:
    ncu = shutil.which("ncu") or next((str(p) for p in sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"),
                                                              reverse=True)), None)
    if ncu is None:
        raise NsysNotFoundError("no ncu executable found on PATH or in /opt/nvidia/nsight-compute/*/; install "
                                "Nsight Compute")
    return ncu


def ncu_command(ncu: str, base: Path, cmd: list[str], *, kernels_regex: str | None = None,
                nvtx_include: str | None = None, clock_control: str = "none",
                ncu_args: list[str] | None = None) -> list[str]:
    """The ncu command line of ``traceql collect --ncu``: the preset, the filters, then the program."""
    if clock_control not in NCU_CLOCK_CONTROLS:
        raise UsageError(f"--clock-control {clock_control!r}: choose {', '.join(NCU_CLOCK_CONTROLS)} (none keeps "
                         "the clocks the GPU runs at, as in the traced run)")
    if kernels_regex is not None:
        try:
            re.compile(kernels_regex)
        except re.error as exc:
            raise UsageError(f"--kernels {kernels_regex!r}: not a regular expression ({exc})") from exc
    # The user's pattern may match anywhere in the function name, as a search would.
    names = NCU_EXCLUDE + (f".*?(?:{kernels_regex})" if kernels_regex else "")
    full = [ncu, "--target-processes", "all", "--clock-control", clock_control, "--kernel-name-base", "function",
            "--kernel-name", f"regex:{names}", "--metrics", ",".join(NCU_METRICS)]
    for section in NCU_SECTIONS:
        full += ["--section", section]
    if nvtx_include:
        full += ["--nvtx", "--nvtx-include", nvtx_include]
    return [*full, *(ncu_args or []), "-f", "-o", str(base).replace("%", "%%"), *cmd]  # --name is expanded already


def _collect_ncu(cmd, base: Path, timeout, kernels_regex, nvtx_include, clock_control, log, *,
                 labels: dict[str, str] | None = None, ncu_args: list[str] | None = None) -> Collection:
    full = ncu_command(find_ncu(), base, cmd, kernels_regex=kernels_regex, nvtx_include=nvtx_include,
                       clock_control=clock_control, ncu_args=ncu_args)
    log("traceql: " + shlex.join(full))
    rc, _, ended = _run_group(full, timeout, log)
    report = _named(base, ".ncu-rep")
    if not report.exists():
        raise BadInputError(f"ncu wrote no report (exit code {rc}); see its output above")
    messages = [f"Nsight Compute report {report}" + (" (partial: collection ended early)" if ended else "")]
    from ..ingest import ingest_one

    all_labels = {**environment_labels(cmd), **(labels or {}), "name": base.name, "clock_control": clock_control}
    try:
        info = ingest_one(report, base.parent.parent, labels=all_labels)
    except BadInputError as exc:
        if rc == 0 and not ended:
            raise
        messages.append(f"nothing to ingest: {exc}")
        return Collection(report, None, rc or 130, messages)
    messages.append(f"run {info.run_id} in {base.parent.parent} ({info.tables.get('ncu_kernels', 0)} profiled "
                    "kernels)")
    return Collection(report, info.run_id, rc, messages)
