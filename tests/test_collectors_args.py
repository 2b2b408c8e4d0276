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


def test_overlap_modes_run_abba():
    """Each mode's iterations split in two ranges, the second pass in reverse order, so a drifting clock weighs on
    every mode alike; the iteration numbers go on from the first range; one iteration runs once."""
    modes = ["compute", "comm", "overlapped", "sequential"]
    assert overlap.parse_args([]).order == "abba"
    assert overlap.passes(modes, [4, 5, 1, 6], "abba") == [
        ("compute", 0, 2), ("comm", 0, 3), ("overlapped", 0, 1), ("sequential", 0, 3),
        ("sequential", 3, 3), ("comm", 3, 2), ("compute", 2, 2)]
    assert overlap.passes(modes, [4, 5, 1, 6], "fixed") == [
        ("compute", 0, 4), ("comm", 0, 5), ("overlapped", 0, 1), ("sequential", 0, 6)]
    for iters in ([4, 4, 4, 4], [7, 1, 2, 3]):  # every iteration once, whatever the split
        got = overlap.passes(modes, iters, "abba")
        for m, n in zip(modes, iters, strict=True):
            assert sorted(i for mode, a, k in got if mode == m for i in range(a, a + k)) == list(range(n))
