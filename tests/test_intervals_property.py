"""Property tests: the SQL interval arithmetic (step functions integrated over boundaries) against a
brute-force reference that walks integer time and counts unit cells [t, t+1).

Random activities on a device (nested, touching, identical and zero-length intervals on small integer
coordinates), each a compute kernel, a communication kernel, a peer copy (communication), a copy or a memset.
Each example holds one to four such layouts, each on its own device over the same time range (devices must
not see each other's work); one query per view checks them all, which keeps the test fast (the views cost
about a second per query whatever the data size): 25 examples check about 60 layouts.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import make_store

import traceql
from traceql import attribution

S = 10  # SMs: small, so that communication CTAs add up past it
KINDS = ("compute", "comm", "peer", "copy", "memset")

activity = st.tuples(
    st.integers(0, 24),  # start
    st.integers(0, 8),  # duration (0 included)
    st.sampled_from(KINDS),
    st.integers(1, 14),  # CTAs (kernels)
)


@pytest.fixture(scope="module")
def workspace():
    """One run directory rewritten by every example, and one connection whose views read it."""
    root = Path(tempfile.mkdtemp(prefix="traceql-intervals-"))
    # every table the examples write starts non-empty: the connection's views list only files that held rows
    make_store(root, kernels=[dict(start_ns=0, end_ns=1)], memcpy=[dict(start_ns=0, end_ns=1)],
               memset=[dict(start_ns=0, end_ns=1)], devices=[dict(sm_count=S)])
    con = traceql.connect(root)
    yield root, con
    con.close()
    shutil.rmtree(root, ignore_errors=True)


def _write(root: Path, layouts: list[list[tuple[int, int, str, int]]]) -> None:
    kernels, memcpy, memset = [], [], []
    for dev, i, (start, dur, kind, ctas) in _numbered(layouts):
        row = dict(device_id=dev, start_ns=start, end_ns=start + dur, correlation_id=i)
        if kind in ("compute", "comm"):
            kernels.append(dict(row, kind=kind, ctas=ctas, name=f"k{i}" if kind == "compute" else None))
        elif kind in ("peer", "copy"):
            memcpy.append(dict(row, is_peer=kind == "peer"))
        else:
            memset.append(row)
    kernels = [{k: v for k, v in r.items() if v is not None} for r in kernels]
    devices = [dict(device_id=d, sm_count=S) for d in range(len(layouts))]
    make_store(root, kernels=kernels, memcpy=memcpy, memset=memset, devices=devices)


def _numbered(layouts):
    """(device, correlation id, activity): ids unique over the example."""
    i = 0
    for dev, acts in enumerate(layouts):
        for act in acts:
            yield dev, i, act
            i += 1


def _cells(start: int, dur: int) -> set[int]:
    return set(range(start, start + dur))


def _reference(acts, first_id: int = 0):
    """Per compute kernel (by correlation id) and for the device, by counting unit cells."""
    comm_kinds, copy_kinds = {"comm", "peer"}, {"copy", "memset"}
    cells = [_cells(s, d) for s, d, _, _ in acts]

    def union(pred, skip=None):
        return set().union(*(c for j, (c, a) in enumerate(zip(cells, acts, strict=True)) if pred(a) and j != skip))

    u_comm = union(lambda a: a[2] in comm_kinds)
    u_comp = union(lambda a: a[2] == "compute")
    per_kernel = {}
    for i, (_, dur, kind, _) in enumerate(acts):
        if kind != "compute":
            continue
        mine = cells[i]
        others = union(lambda a: True, skip=i)
        sm_comm = sm_all = 0  # SM-ns held by communication / by all co-runners during the kernel
        for t in mine:
            comm_ctas = sum(c for s, d, k, c in acts if k == "comm" and s <= t < s + d)
            comp_ctas = sum(min(c, S) for j, (s, d, k, c) in enumerate(acts)
                            if k == "compute" and j != i and s <= t < s + d)
            sm_comm += min(S, comm_ctas)
            sm_all += min(S, comm_ctas) + comp_ctas
        overlap = len(mine & others)
        per_kernel[first_id + i] = dict(
            comm_overlap_ns=len(mine & u_comm),
            compute_overlap_ns=len(mine & union(lambda a: a[2] == "compute", skip=i)),
            copy_overlap_ns=len(mine & union(lambda a: a[2] in copy_kinds)),
            overlap_ns=overlap,
            comm_sm_share=sm_comm / dur / S if dur else None,
            sm_share=min(1.0, sm_all / dur / S) if dur else None,
            corunner_sms=sm_all / overlap if overlap else None,
        )
    device = dict(compute_ns=len(u_comp), comm_ns=len(u_comm), overlap_ns=len(u_comp & u_comm),
                  exposed_comm_ns=len(u_comm - u_comp))
    return per_kernel, device


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(activity, min_size=1, max_size=9), min_size=1, max_size=4))
def test_overlaps_match_brute_force(workspace, layouts):
    root, con = workspace
    _write(root, layouts)
    want_kernels, want_devices, first = {}, {}, 0
    for dev, acts in enumerate(layouts):
        kernels, want_devices[dev] = _reference(acts, first)
        want_kernels.update(kernels)
        first += len(acts)

    rows = con.sql("""SELECT correlation_id, comm_overlap_ns, compute_overlap_ns, copy_overlap_ns, overlap_ns,
                             comm_sm_share, sm_share, corunner_sms FROM kernel_overlap""").fetchall()
    cols = ("comm_overlap_ns", "compute_overlap_ns", "copy_overlap_ns", "overlap_ns", "comm_sm_share", "sm_share",
            "corunner_sms")
    got = {r[0]: dict(zip(cols, r[1:], strict=True)) for r in rows}
    assert set(got) == set(want_kernels)
    for i, want in want_kernels.items():
        for col, value in want.items():
            assert got[i][col] == (pytest.approx(value) if value is not None else None), (i, col, layouts)

    # device_summary carries the slowdowns too: it is read once the attribution is prepared (before, an error), on a
    # connection of its own (prepare keeps its tables on the connection, which the next example must not read)
    prepared = traceql.connect(root)
    attribution.prepare(prepared)
    summary = prepared.sql("""SELECT device_id, compute_ns, comm_ns, overlap_ns, exposed_comm_ns FROM device_summary
                              WHERE nvtx IS NULL""").fetchall()
    prepared.close()
    got_devices = {r[0]: dict(compute_ns=r[1], comm_ns=r[2], overlap_ns=r[3], exposed_comm_ns=r[4]) for r in summary}
    assert got_devices == want_devices, layouts
