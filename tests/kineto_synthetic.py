"""A small torch.profiler (Kineto) trace written by hand, with answers known exactly: every event kind traceql reads,
in the layout Kineto's ChromeTraceLogger writes (``ts``/``dur`` in microseconds with three decimals, GPU events on
``pid`` = device and ``tid`` = stream, the collective's metadata on ``record_param_comms`` and on its kernel), and
events traceql leaves out (python functions, flows, instants, metadata).

Rank 0 of 2, process 4242 (threads 4242: the training loop, 4250: autograd). On GPU 0, in microseconds:

    1001.000 +2.500   Memcpy HtoD 4096 B          (stream 7, correlation 100)
    1004.000 +1.000   Memset 512 B                (stream 7, correlation 99)
    1030.250 +50.125  gemm A                      (stream 7, correlation 101), alone until 1050
    1050.000 +40.000  NCCL all-reduce bf16, 2 MiB (stream 20, correlation 102)
    1085.000 +25.000  gemm A again                (stream 7, correlation 103)

so compute runs 1030.250-1110.000 except 1080.375-1085.000, communication 1050-1090, both together
1050.000-1080.375 and 1085.000-1090.000.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

BASE_NS = 1_700_000_000_000_000_000
PID, MAIN_TID, AUTOGRAD_TID = 4242, 4242, 4250
GEMM = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMMS = {"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 2,
         "dtype": "BFloat16", "Process Group Name": "0", "Process Group Description": "default_pg",
         "Process Group Ranks": "[0, 1]"}


def _x(cat: str, name: str, pid, tid, ts: str, dur: str, **args) -> dict:
    # ts and dur as Kineto writes them: microseconds with three decimals (a JSON number, written here as its text)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": f"@{ts}@", "dur": f"@{dur}@",
            **({"args": args} if args else {})}


def _kernel(name: str, ts: str, dur: str, corr: int, stream: int, grid, block, regs: int, smem: int, **extra) -> dict:
    return _x("kernel", name, 0, stream, ts, dur, **{
        "External id": corr + 1000, "queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": corr,
        "registers per thread": regs, "shared memory": smem, "blocks per SM": 1.0, "warps per SM": 8.0,
        "grid": grid, "block": block, "est. achieved occupancy %": 12, **extra})


def _runtime(name: str, tid: int, ts: str, dur: str, corr: int, cat: str = "cuda_runtime") -> dict:
    return _x(cat, name, PID, tid, ts, dur, cbid=211, correlation=corr, **{"External id": corr + 1000})


def trace() -> dict:
    """The trace, as the dict torch.profiler's JSON decodes to (times still as their text, see :func:`write`)."""
    events = [
        {"name": "process_name", "ph": "M", "ts": "@0.000@", "pid": PID, "tid": 0, "args": {"name": "python3"}},
        {"name": "process_name", "ph": "M", "ts": "@0.000@", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": "@0.000@", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
        _x("user_annotation", "ProfilerStep#3", PID, MAIN_TID, "1000.000", "500.000", **{"External id": 1}),
        _x("user_annotation", "case:gemm;mode=overlapped;size=4096", PID, MAIN_TID, "1010.500", "100.000"),
        _x("cpu_op", "aten::copy_", PID, MAIN_TID, "1000.500", "5.000", **{"External id": 3}),
        _runtime("cudaMemcpyAsync", MAIN_TID, "1000.600", "1.000", 100),
        _runtime("cudaMemsetAsync", MAIN_TID, "1003.000", "0.500", 99),
        _x("cpu_op", "aten::mm", PID, MAIN_TID, "1020.001", "10.002", **{"External id": 5}),
        _runtime("cudaLaunchKernel", MAIN_TID, "1025.123", "4.500", 101),
        _x("cpu_op", "aten::mm", PID, MAIN_TID, "1080.000", "5.000", **{"External id": 6}),
        _runtime("cudaLaunchKernel", MAIN_TID, "1081.000", "2.000", 103),
        _x("cpu_op", "record_param_comms", PID, AUTOGRAD_TID, "1040.000", "20.000",
           **{"External id": 7, "Record function id": 0, **COMMS, "Rank": 0}),
        _x("user_annotation", "nccl:all_reduce", PID, AUTOGRAD_TID, "1042.000", "10.000", **{"External id": 8}),
        _runtime("cuLaunchKernelEx", AUTOGRAD_TID, "1045.000", "3.000", 102, cat="cuda_driver"),
        _x("python_function", "train.py(42): step", PID, MAIN_TID, "999.000", "600.000"),
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 0, 7, "1001.000", "2.500", device=0, context=1,
           stream=7, correlation=100, bytes=4096, **{"memory bandwidth (GB/s)": "@1.6384@"}),
        _x("gpu_memset", "Memset (Device)", 0, 7, "1004.000", "1.000", device=0, context=1, stream=7,
           correlation=99, bytes=512, **{"memory bandwidth (GB/s)": "@0.512@"}),
        _kernel(GEMM, "1030.250", "50.125", 101, 7, [132, 1, 1], [256, 1, 1], 232, 73728),
        _kernel(NCCL, "1050.000", "40.000", 102, 20, [24, 1, 1], [640, 1, 1], 96, 8896, **COMMS),
        _kernel(GEMM, "1085.000", "25.000", 103, 7, [132, 1, 1], [256, 1, 1], 232, 73728),
        _x("gpu_user_annotation", "case:gemm;mode=overlapped;size=4096", 0, 7, "1030.249", "50.127",
           **{"External id": 2}),
        {"ph": "s", "id": 101, "pid": PID, "tid": MAIN_TID, "ts": "@1025.123@", "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 101, "pid": 0, "tid": 7, "ts": "@1030.250@", "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace",
         "ts": "@1000.000@"},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": "@1600.000@"},
    ]
    props = [{"id": i, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045641216, "computeMajor": 9,
              "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
              "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
              "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
             for i in range(2)]
    return {"schemaVersion": 1, "deviceProperties": props,
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
            "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
            "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_NS, "traceEvents": events,
            "traceName": "rank0.pt.trace.json"}


def dumps(data: dict) -> str:
    """JSON with the times as bare numbers of three decimals, as Kineto prints them (not as Python floats would)."""
    return json.dumps(data, indent=1).replace('"@', "").replace('@"', "")


def write(path: Path, data: dict | None = None) -> Path:
    text = dumps(trace() if data is None else data)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)
    return path


def variant(**changes) -> dict:
    data = copy.deepcopy(trace())
    data.update(changes)
    return data
