"""``traceql collect -- CMD``: run a program under nsys (or ncu) with flags that fit, then ingest it.

The ``.nsys-rep`` is kept as the archive under ``OUT/reports/``; the run joins the run store
``OUT``. The program runs in its own process group: on Ctrl-C, a ``--timeout`` or a crash, the
whole group is ended, whatever report nsys wrote is kept, and traceql says what it kept.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .errors import BadInputError, NsysNotFoundError, TraceqlError, UsageError
from .nsys.locate import find_nsys, nsys_version

ENV_RECORDED = re.compile(r"^(NCCL_|CUDA_|TORCH_|NVSHMEM_|OMP_NUM_THREADS$|WORLD_SIZE$|LOCAL_WORLD_SIZE$|MASTER_)")
TOO_OLD = "Unknown runtime API function"
NCU_METRICS = ("dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,"
               "sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,"
               "sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_blocks")
NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis")


class ProgramFailedError(TraceqlError, RuntimeError):
    """The profiled program exited non-zero; ``exit_code`` is its code."""


@dataclass
class Collection:
    report: Path | None
    run_id: str | None
    exit_code: int
    messages: list[str] = field(default_factory=list)


def gpus_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def nsys_flags(version: tuple[int, ...], gpu_metrics: bool, have_gpu: bool) -> list[str]:
    """Flags that fit this nsys: CUDA + NVTX + OS runtime, graph nodes, GPU metrics on the GPUs in use."""
    flags = ["-t", "cuda,nvtx,osrt" if have_gpu else "nvtx,osrt", "-s", "none", "--cpuctxsw=none",
             "--force-overwrite=true"]
    if have_gpu and version >= (2023, 3):
        flags.append("--cuda-graph-trace=node")
    if gpu_metrics:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        devices = visible if visible and all(p.strip().isdigit() for p in visible.split(",")) else "all"
        # 2023.2 renamed the singular option; both take a list or "all"
        flags.append(f"--gpu-metrics-devices={devices}" if version >= (2023, 2) else f"--gpu-metrics-device={devices}")
    return flags


def environment_labels(cmd: list[str]) -> dict[str, str]:
    labels = {"command": " ".join(cmd), "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    labels.update({f"env.{k}": v for k, v in sorted(os.environ.items()) if ENV_RECORDED.match(k)})
    for pkg in ("torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "jax"):
        try:
            labels[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    if smi := shutil.which("nvidia-smi"):
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
            if out:
                labels["driver"] = out[0].split(",")[0].strip()
                labels["gpus"] = ";".join(line.split(",", 1)[1].strip() for line in out)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return labels


def _run_group(cmd: list[str], timeout: float | None, log) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own process group; on Ctrl-C or timeout end the group, letting nsys finish its report."""
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    tail: list[str] = []
    interrupted = False
    deadline = None if timeout is None else time.monotonic() + timeout

    def end_group() -> None:
        # SIGINT first: nsys stops the program and still writes what it collected
        for sig, grace in ((signal.SIGINT, 120), (signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue

    import threading

    def pump() -> None:
        for line in proc.stdout:
            log(line.rstrip("\n"))
            tail.append(line)
            del tail[:-200]

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                interrupted = True
                log(f"traceql: --timeout of {timeout:g} s reached; ending the program's process group")
                end_group()
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
        log("traceql: interrupted; ending the program's process group and keeping what nsys wrote")
        end_group()
    reader.join(5)
    return proc.wait(), "".join(tail), interrupted


def collect(cmd: list[str], out: str | Path = "traceql-runs", *, name: str | None = None, gpu_metrics: bool = False,
            power: bool = False, ncu: bool = False, nsys_args: list[str] | None = None, timeout: float | None = None,
            labels: dict[str, str] | None = None, kernels_regex: str | None = None, nvtx_include: str | None = None,
            clock_control: str = "none", log=print) -> Collection:
    """Profile ``cmd`` and ingest the result into the run store ``out``."""
    if not cmd:
        raise UsageError("give the program to profile after --: traceql collect -- python train.py")
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        raise BadInputError(f"{cmd[0]}: command not found; check the program after `--`")
    have_gpu = gpus_present()
    if (gpu_metrics or power or ncu) and not have_gpu:
        what = "--gpu-metrics" if gpu_metrics else "--power" if power else "--ncu"
        raise BadInputError(f"{what} needs an NVIDIA GPU, and none was found (nvidia-smi -L lists none)")
    out = Path(out)
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    name = name or dt.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    all_labels = {**environment_labels(cmd), **(labels or {}), "name": name}
    if ncu:
        return _collect_ncu(cmd, reports / name, timeout, kernels_regex, nvtx_include, clock_control, log)
    nsys = find_nsys()
    version = nsys_version(nsys)
    all_labels["nsys"] = ".".join(map(str, version))
    base = reports / name
    full = [nsys, "profile", *nsys_flags(version, gpu_metrics, have_gpu), *(nsys_args or []), "-o", str(base), *cmd]
    log("traceql: " + " ".join(full))
    if not have_gpu:
        log("traceql: no NVIDIA GPU found: collecting CPU, OS runtime and NVTX activity only")
    sampler = None
    power_file = reports / f"{name}.power.parquet"
    if power:
        sampler = subprocess.Popen([sys.executable, "-m", "traceql.power", str(power_file)], start_new_session=True)
    try:
        rc, tail, interrupted = _run_group(full, timeout, log)
    finally:
        if sampler is not None:
            sampler.send_signal(signal.SIGTERM)
            sampler.wait(60)
    report = base.with_suffix(".nsys-rep")
    messages = []
    if TOO_OLD in tail:
        raise BadInputError(f"{nsys} ({'.'.join(map(str, version))}) is too old to trace this program's CUDA "
                            f"(\"{TOO_OLD}\"); install a newer Nsight Systems and point TRACEQL_NSYS at it")
    if not report.exists():
        partial = sorted(reports.glob(f"{name}*.qdstrm"))
        hint = f"; the raw collection was kept as {partial[0]}" if partial else ""
        raise BadInputError(f"nsys wrote no report (exit code {rc}){hint}; see its output above")
    if interrupted:
        messages.append(f"collection ended early; the partial report was kept as {report}")
    elif rc != 0:
        messages.append(f"the program exited with code {rc}; its report was kept as {report}")
    from .ingest import ingest_one

    try:
        info = ingest_one(report, out, require_kernels=False, labels=all_labels,
                          power_file=power_file if power and power_file.exists() else None)
    except BadInputError as exc:
        if rc == 0 and not interrupted:
            raise
        messages.append(f"nothing to ingest: {exc}")
        return Collection(report, None, rc or 130, messages)
    messages.append(f"run {info.run_id} in {out} ({info.tables.get('kernels', 0)} kernels)")
    return Collection(report, info.run_id, 130 if interrupted and rc == 0 else rc, messages)


def _collect_ncu(cmd, base: Path, timeout, kernels_regex, nvtx_include, clock_control, log) -> Collection:
    ncu = shutil.which("ncu") or next((p for p in sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"),
                                                          reverse=True)), None)
    if ncu is None:
        raise NsysNotFoundError("no ncu executable found on PATH or in /opt/nvidia/nsight-compute/*/; install "
                                "Nsight Compute")
    # NCCL kernels hang under kernel replay (they wait for peers that are not replayed): never profile them.
    regex = kernels_regex or ".*"
    full = [str(ncu), "--clock-control", clock_control, "--kernel-name-base", "function",
            "--kernel-name", f"regex:^(?!nccl)(?:{regex})", "--metrics", NCU_METRICS, "-f", "-o", str(base)]
    for section in NCU_SECTIONS:
        full += ["--section", section]
    if nvtx_include:
        full += ["--nvtx", "--nvtx-include", nvtx_include]
    full += cmd
    log("traceql: " + " ".join(full))
    rc, _, interrupted = _run_group(full, timeout, log)
    report = base.with_suffix(".ncu-rep")
    if not report.exists():
        raise BadInputError(f"ncu wrote no report (exit code {rc}); see its output above")
    msgs = [f"Nsight Compute report {report}" + (" (partial: collection ended early)" if interrupted else "")]
    return Collection(report, None, rc, msgs)
