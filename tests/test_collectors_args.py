"""The workloads' command lines, without a GPU: what collectors/reproduction.sh and the docs rely on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "collectors"))
import overlap  # noqa: E402
import train  # noqa: E402


def test_train_modes_and_parallelism():
    args = train.parse_args(["--parallel", "fsdp2"])
    assert (args.parallel, args.modes) == ("fsdp2", "overlapped,sequential,compute")
    assert train.parse_args(["--mode", "ddp"]).parallel == "ddp"  # the former option name still works
    with pytest.raises(SystemExit):
        train.parse_args(["--modes", "overlapped,bogus"])
    with pytest.raises(SystemExit):
        train.parse_args(["--parallel", "tp"])


def test_overlap_collective_data_types():
    # fp8 gathers move fp8; its reductions move bf16; tf32 GEMMs communicate fp32
    assert [overlap._comm_dtype("fp8", op) for op in overlap.OPS] == ["bf16", "fp8", "bf16"]
    assert overlap._comm_dtype("tf32", "all_reduce") == "fp32"
    assert overlap._comm_dtype("bf16", "all_gather") == "bf16"
    args = overlap.parse_args(["--max-ctas", "default,2,8", "--min-case-ms", "100"])
    assert (args.max_ctas, args.min_case_ms, args.iters) == ("default,2,8", 100.0, 6)
