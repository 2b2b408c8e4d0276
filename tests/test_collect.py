"""``traceql collect`` end to end, CPU only: the real CLI, the real nsys, collectors/cpu_nvtx.py under it.

Each test runs ``python -m traceql.cli collect ... -- python collectors/cpu_nvtx.py`` in a subprocess
and reads what it left: the report, the run store (manifest and nvtx table), the exit code, and the
processes still alive afterwards.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_cli

import traceql
from traceql.collect import gpus_present

CPU_NVTX = REPO / "collectors" / "cpu_nvtx.py"
ESCAPE_TEXT = "<script>alert(1)</script> & co"
STEPS, THREADS = 3, 2


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TRACEQL_"))}
    env.update(extra)
    return env


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _kill_survivors(pidfile: Path) -> None:
    if pidfile.exists():
        for pid in map(int, pidfile.read_text().split()):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _manifest_run(store: Path) -> tuple[str, dict]:
    runs = json.loads((store / "manifest.json").read_text())["runs"]
    assert len(runs) == 1, runs
    return next(iter(runs.items()))


def _nvtx(store: Path) -> list[dict]:
    con = traceql.connect(store, views=False)
    try:
        return con.sql("SELECT text, event_type, case_name, labels, depth, global_tid, start_ns, end_ns "
                       "FROM nvtx ORDER BY start_ns").pl().to_dicts()
    finally:
        con.close()


def _check_cpu_nvtx_ranges(store: Path) -> None:
    """The ranges cpu_nvtx.py emits, with their labels parsed and their nesting kept."""
    rows = _nvtx(store)
    ranges = [r for r in rows if r["event_type"] == "push_pop"]
    cases = [r for r in ranges if r["text"].startswith("case:")]
    expected = {f"case:cpu_demo;step={s};thread={t}" for s in range(STEPS) for t in range(THREADS)}
    assert sorted(r["text"] for r in cases) == sorted(expected)
    for r in cases:
        step, thread = r["text"].split(";")[1:]
        assert r["case_name"] == "cpu_demo"
        assert dict(r["labels"]) == {"step": step.split("=")[1], "thread": thread.split("=")[1]}
        assert r["depth"] == 0
    forwards = [r for r in ranges if r["text"] == "forward"]
    assert len(forwards) == STEPS * THREADS
    for f in forwards:
        assert f["depth"] == 1 and f["case_name"] is None and f["labels"] is None
        outer = [c for c in cases if c["global_tid"] == f["global_tid"]
                 and c["start_ns"] <= f["start_ns"] and f["end_ns"] <= c["end_ns"]]
        assert len(outer) == 1, f"forward at {f['start_ns']} is not inside exactly one case range of its thread"
    assert [r["text"] for r in ranges if r["text"] == ESCAPE_TEXT] == [ESCAPE_TEXT]
    marks = sorted(r["text"] for r in rows if r["event_type"] == "mark")
    assert marks == sorted(f"mark:step={s};thread={t}" for s in range(STEPS) for t in range(THREADS))
    assert len({r["global_tid"] for r in cases}) == THREADS


@pytest.mark.nsys
def test_collect_records_nvtx_ranges_command_env_and_labels(tmp_path):
    store = tmp_path / "store"
    cmd = [sys.executable, str(CPU_NVTX)]
    rc, out, err = run_cli("collect", "-o", store, "--name", "demo", "--label", "experiment=cpu", "--", *cmd,
                           env=_env(NCCL_MAX_CTAS="4", UNRELATED_SECRET="x"))
    assert rc == 0, err
    report = store / "reports" / "demo.nsys-rep"
    assert report.is_file()
    run_id, entry = _manifest_run(store)
    assert entry["source_path"] == str(report.resolve())
    assert entry["tables"]["nvtx"] == 2 * STEPS * THREADS + STEPS * THREADS + 1  # ranges + forwards + marks + escape
    labels = entry["labels"]
    assert labels["command"] == shlex.join(cmd)
    assert labels["env.NCCL_MAX_CTAS"] == "4"
    assert not any("UNRELATED_SECRET" in k for k in labels)
    assert labels["experiment"] == "cpu" and labels["name"] == "demo"
    assert labels["nsys"].split(".")[0].isdigit() and len(labels["nsys"].split(".")[0]) == 4
    con = traceql.connect(store, views=False)
    try:
        assert json.loads(con.sql("SELECT labels_json FROM runs").fetchall()[0][0]) == labels
    finally:
        con.close()
    _check_cpu_nvtx_ranges(store)
    assert f"run {run_id} in {store}" in err


@pytest.mark.nsys
def test_collect_propagates_the_program_exit_code_and_keeps_the_run(tmp_path):
    store = tmp_path / "store"
    rc, out, err = run_cli("collect", "-o", store, "--name", "rank%q{RANK}", "--", sys.executable, CPU_NVTX,
                           "--exit-code", "3", env=_env(RANK="3"))
    assert rc == 3, err
    report = store / "reports" / "rank3.nsys-rep"  # %q{RANK} expanded as nsys would
    assert report.is_file()
    assert f"the program exited with code 3; its report was kept as {report}" in err
    _, entry = _manifest_run(store)
    assert entry["labels"]["name"] == "rank3" and entry["labels"]["env.RANK"] == "3"
    _check_cpu_nvtx_ranges(store)


@pytest.mark.nsys
def test_nsys_args_replace_the_options_they_set(tmp_path):
    store = tmp_path / "store"
    rc, out, err = run_cli("collect", "-o", store, "--name", "nvtx_only", "--nsys-args", "--trace=nvtx --sample=none",
                           "--", sys.executable, CPU_NVTX, env=_env())
    assert rc == 0, err  # nsys refuses an option given twice: traceql's -t and -s must have made way
    line = next(x for x in err.splitlines() if x.startswith("traceql: ") and " profile " in x)
    args = shlex.split(line.removeprefix("traceql: "))
    assert "--trace=nvtx" in args and "--sample=none" in args and "-t" not in args and "-s" not in args
    assert "--cpuctxsw=none" in args
    _check_cpu_nvtx_ranges(store)


def test_nsys_args_cannot_name_the_report(tmp_path):
    rc, out, err = run_cli("collect", "-o", tmp_path / "store", "--nsys-args", "-o elsewhere", "--", sys.executable,
                           CPU_NVTX, env=_env())
    _assert_clean_error(rc, err)
    assert "--nsys-args must not set -o/--output" in err
    assert not (tmp_path / "store").exists()


def _check_ended_run(store: Path, pidfile: Path, err: str) -> None:
    assert pidfile.exists(), f"the program never got past its NVTX ranges:\n{err}"
    pids = list(map(int, pidfile.read_text().split()))
    assert len(pids) == 2
    survivors = [p for p in pids if _alive(p)]
    assert not survivors, f"still running after traceql returned: {survivors}"
    assert "the partial report was kept as" in err
    _manifest_run(store)
    _check_cpu_nvtx_ranges(store)


@pytest.mark.nsys
def test_timeout_ends_the_program_and_its_children_and_keeps_the_report(tmp_path):
    store, pidfile = tmp_path / "store", tmp_path / "pids"
    t0 = time.monotonic()
    try:
        rc, out, err = run_cli("collect", "-o", store, "--name", "held", "--timeout", "10", "--", sys.executable,
                               CPU_NVTX, "--hold", "300", "--child-pidfile", pidfile, env=_env(), timeout=200)
        assert rc == 124, err
        assert time.monotonic() - t0 < 120
        assert "--timeout of 10 s" in err
        assert (store / "reports" / "held.nsys-rep").is_file()
        _check_ended_run(store, pidfile, err)
    finally:
        _kill_survivors(pidfile)


@pytest.mark.nsys
def test_ctrl_c_ends_the_program_and_its_children_and_keeps_the_report(tmp_path):
    store, pidfile = tmp_path / "store", tmp_path / "pids"
    cli = subprocess.Popen([sys.executable, "-m", "traceql.cli", "collect", "-o", str(store), "--name", "stopped",
                            "--", sys.executable, str(CPU_NVTX), "--hold", "300", "--child-pidfile", str(pidfile)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        cli.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends to traceql
        out, err = cli.communicate(timeout=200)
        assert cli.returncode == 130, err
        assert "interrupted" in err
        assert (store / "reports" / "stopped.nsys-rep").is_file()
        _check_ended_run(store, pidfile, err)
    finally:
        if cli.poll() is None:
            cli.kill()
        _kill_survivors(pidfile)


def _assert_clean_error(rc: int, err: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    assert err.startswith("traceql: ")


@pytest.mark.parametrize("program", ["traceql-no-such-program", "./no/such/program"])
def test_a_command_that_does_not_exist_is_refused(tmp_path, program):
    store = tmp_path / "store"
    rc, out, err = run_cli("collect", "-o", store, "--", program, "--flag", env=_env())
    _assert_clean_error(rc, err)
    assert program in err and ("command not found" in err or "no such file" in err)
    assert not store.exists()


def test_a_script_that_is_not_executable_is_refused_with_the_fix(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    script.chmod(0o644)
    rc, out, err = run_cli("collect", "-o", tmp_path / "store", "--", script, env=_env())
    _assert_clean_error(rc, err)
    assert f"{script}: not an executable file" in err and f"python3 {script}" in err


@pytest.mark.parametrize(("name", "why"), [("rank%p", "%p is not supported"), ("r%q{TRACEQL_UNSET_VAR}", "not set"),
                                         ("runs/a", "give a file name")])
def test_a_report_name_traceql_cannot_resolve_is_refused(tmp_path, name, why):
    rc, out, err = run_cli("collect", "-o", tmp_path / "store", "--name", name, "--", sys.executable, CPU_NVTX,
                           env=_env())
    _assert_clean_error(rc, err)
    assert why in err and name in err
    assert not (tmp_path / "store").exists()


def test_no_nsys_says_where_it_looked(tmp_path):
    missing = tmp_path / "opt" / "nsys"
    env = _env(TRACEQL_NSYS=str(missing), PATH=str(Path(sys.executable).parent))
    rc, out, err = run_cli("collect", "-o", tmp_path / "store", "--", sys.executable, CPU_NVTX, env=env)
    _assert_clean_error(rc, err)
    assert f"TRACEQL_NSYS={missing} is not an executable file" in err
    assert "PATH" in err and "/opt/nvidia/nsight-systems/*/bin/nsys" in err
    assert not (tmp_path / "store").exists()


@pytest.mark.skipif(gpus_present(), reason="needs a machine without an NVIDIA GPU")
@pytest.mark.parametrize("flag", ["--gpu-metrics", "--power", "--ncu"])
def test_gpu_only_options_without_a_gpu_are_refused(tmp_path, flag):
    rc, out, err = run_cli("collect", "-o", tmp_path / "store", flag, "--", sys.executable, CPU_NVTX, env=_env())
    _assert_clean_error(rc, err)
    assert f"{flag} needs an NVIDIA GPU" in err
    assert not (tmp_path / "store").exists()


BROKEN_SMI = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest \
NVIDIA driver is installed and running."
exit 9
"""


def _broken_smi_path(tmp_path: Path) -> str:
    """A PATH whose nvidia-smi exists but reaches no driver, as on a CPU node with nvidia-utils installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(BROKEN_SMI)
    smi.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def test_an_nvidia_smi_without_a_driver_is_no_gpu(tmp_path, monkeypatch):
    from traceql.collect import environment_labels

    monkeypatch.setenv("PATH", _broken_smi_path(tmp_path))
    assert gpus_present() is False
    labels = environment_labels(["true"])  # used to fail with IndexError on the error line
    assert "gpus" not in labels and "driver" not in labels and labels["command"] == "true"


@pytest.mark.nsys
def test_collect_with_a_broken_nvidia_smi_collects_cpu_activity(tmp_path):
    env = _env(PATH=_broken_smi_path(tmp_path))
    rc, out, err = run_cli("collect", "-o", tmp_path / "store", "--", sys.executable, CPU_NVTX, env=env)
    assert rc == 0 and "Traceback" not in err, err
    assert "GPU metrics not sampled: no NVIDIA GPU found" in err  # on by default, said plainly when impossible
    _check_cpu_nvtx_ranges(tmp_path / "store")
    rc, out, err = run_cli("collect", "-o", tmp_path / "store2", "--gpu-metrics", "--", sys.executable, CPU_NVTX,
                           env=env)
    _assert_clean_error(rc, err)
    assert "--gpu-metrics needs an NVIDIA GPU" in err


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("layout", ["nvidia", "debian", "on_path", "none"])
def test_the_importer_is_found_in_the_installation_of_the_nsys_used(tmp_path, layout):
    """NVIDIA's layout (bin/nsys beside host-linux-x64), Debian's (bin/nsys -> target-linux-x64 -> another tree whose
    host-linux-x64 is missing), a link to nsys on PATH; and none where the installation holds no importer."""
    from traceql.sources.nsys.locate import expected_host_dir, find_importer

    version = tmp_path / "opt/nvidia/nsight-systems/2024.5.1"
    shared, arch = tmp_path / "usr/lib/nsight-systems", tmp_path / "usr/lib/x86_64-linux-gnu/nsight-systems"
    if layout == "nvidia":
        nsys = _executable(version / "bin/nsys")
        _executable(version / "target-linux-x64/nsys")
        importer = _executable(version / "host-linux-x64/QdstrmImporter")
        assert expected_host_dir(str(nsys)) == version / "host-linux-x64"
    else:
        _executable(arch / "target-linux-x64/nsys")
        (shared / "bin").mkdir(parents=True)
        (shared / "target-linux-x64").symlink_to("../x86_64-linux-gnu/nsight-systems/target-linux-x64")
        (shared / "bin/nsys").symlink_to("../target-linux-x64/nsys")
        nsys = shared / "bin/nsys"
        if layout == "on_path":
            (tmp_path / "usr/bin").mkdir()
            (tmp_path / "usr/bin/nsys").symlink_to("../lib/nsight-systems/bin/nsys")
            nsys = tmp_path / "usr/bin/nsys"
        importer = None if layout == "none" else _executable(shared / "host-linux-x64/QdstrmImporter")
        assert expected_host_dir(str(nsys)) == arch / "host-linux-x64"
    assert find_importer(str(nsys)) == importer
