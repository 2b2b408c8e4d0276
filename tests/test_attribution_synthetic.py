"""`traceql attribute` on synthetic run stores whose answers are computed by hand (DESIGN.md, Metrics/Attribution).

Every store here has a device with S = 100 SMs unless a test says otherwise; times are in ns.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_cli
from synthetic import NCCL_NAME, launches, make_store, samples

from traceql.attribute import FACTORS, KERNEL_COLUMNS, attribute
from traceql.errors import BadInputError, UsageError

S = 100
DEV = [dict(device_id=0, sm_count=S)]
approx = pytest.approx

# occupancy 1 (one CTA per SM): 1024 threads and more than half an SM's shared memory
ONE_PER_SM = dict(block_x=1024, dynamic_smem_bytes=200_000)


def _attr(tmp_path: Path, name: str = "store", attribute_kwargs: dict | None = None, **store_kwargs):
    store_kwargs.setdefault("devices", DEV)
    root = make_store(tmp_path / name, **store_kwargs)
    return attribute(root, **(attribute_kwargs or {}))


def _by_name(result, nvtx: bool = False) -> dict:
    rows = result.to_json()["kernels"]
    key = (lambda r: (r["name"], r["nvtx"])) if nvtx else (lambda r: r["name"])
    out = {key(r): r for r in rows}
    assert len(out) == len(rows), "one row per signature expected"
    return out


def _device(result, device_id: int = 0) -> dict:
    [row] = [r for r in result.to_json()["summary"] if r["device_id"] == device_id and r["nvtx"] is None]
    return row


def _isolated(name: str, starts, dur: int, **kw) -> list[dict]:
    return [dict(name=name, start_ns=s, end_ns=s + dur, **kw) for s in starts]


def _beside_comm(name: str, start: int, dur: int, comm_ctas: int = 20, margin: int = 100, **kw):
    """A kernel instance fully overlapped by a communication kernel that starts before and ends after it."""
    return ([dict(name=name, start_ns=start, end_ns=start + dur, **kw)],
            [dict(kind="comm", ctas=comm_ctas, start_ns=start - margin, end_ns=start + dur + margin)])




# -- the fully overlapped signature: t0, t1, s, f, SM share, SM model --------------------------------

def _store_a():
    """Signature A (8000 CTAs of 128 threads: 16 per SM, 5 waves): 3 isolated instances of 1000 ns and
    2 instances of 1500 ns fully inside a comm kernel of 20 CTAs."""
    kernels = _isolated("gemm_A", (0, 2000, 4000), 1000, ctas=8000)
    for start in (10_000, 20_000):
        k, c = _beside_comm("gemm_A", start, 1500, ctas=8000)
        kernels += k + c
    return kernels


@pytest.fixture(scope="module")
def result_a(tmp_path_factory):
    """attribute() over the store of signature A, shared by the tests that only read it."""
    return _attr(tmp_path_factory.mktemp("a"), kernels=_store_a())


def test_fully_overlapped_signature(result_a):
    res = result_a
    a = _by_name(res)["gemm_A"]
    assert (a["n"], a["n_overlapped"], a["n_isolated"]) == (5, 2, 3)
    assert a["t0_ns"] == 1000 and a["t0_spread"] == 0 and a["t1_ns"] == 1500
    assert a["slowdown"] == approx(0.5)
    assert a["overlap_fraction"] == approx(1.0) and a["comm_fraction"] == approx(1.0)
    # f = 1: rho = t0/t1, sigma = 1/rho - 1 = s
    assert a["in_overlap_slowdown"] == approx(0.5)
    assert a["corunner_kind"] == "comm"
    assert a["corunner_sms"] == approx(20)
    assert a["sm_share"] == approx(0.2) and a["comm_sm_share"] == approx(0.2)
    # many waves: S/(S-N) - 1 = 100/80 - 1 (throughput) .. ceil(8000/1280)/ceil(8000/1600) - 1 = 7/5 - 1 (waves)
    assert a["occupancy"] == 16
    assert a["sm_predicted"] == approx(0.25)
    assert a["explained_interval"]["sm"] == [approx(0.25), approx(0.4)]
    assert a["significant"] is True
    # no sink: the SM model predicts 0.25 [0.25, 0.4]; the rest of the observed 0.5 stays residual
    assert a["explained"]["sm"] == approx(0.25) and a["predicted"] == approx(0.25)
    assert all(a["explained"][f] == 0 for f in FACTORS if f != "sm")
    assert a["residual"] == approx(0.25)
    assert a["agreement"] == "under" and a["class"] == "unexplained"
    assert "+25.0% [+25.0%, +40.0%]" in a["reason"] and "no GPU metrics" in a["reason"]


def test_fully_overlapped_device_summary(result_a):
    d = _device(result_a)
    # comm: two kernels of 1700 ns; compute: 3 x 1000 + 2 x 1500; overlap: the 2 x 1500 inside the comm kernels
    assert (d["comm_ns"], d["compute_ns"], d["overlap_ns"], d["exposed_comm_ns"]) == (3400, 6000, 3000, 400)
    assert d["hidden_comm_fraction"] == approx(3000 / 3400)
    assert d["overlap_fraction"] == approx(3000 / 6000)  # duration-weighted f over compute kernels
    assert d["compute_slowdown"] == approx(3000 / 2000 - 1)
    assert (d["compute_kernels"], d["overlapped_kernels"]) == (5, 2)


def test_partially_overlapped(tmp_path):
    """B [10000, 11000] beside a comm kernel [10600, 11400] of 20 CTAs: 400 ns of 1000 overlapped."""
    kernels = _isolated("stencil_B", (0, 2000, 4000), 800, ctas=50)
    kernels += [dict(name="stencil_B", ctas=50, start_ns=10_000, end_ns=11_000),
                dict(kind="comm", ctas=20, start_ns=10_600, end_ns=11_400)]
    root = make_store(tmp_path / "s", kernels=kernels, devices=DEV)
    res = attribute(root)
    b = _by_name(res)["stencil_B"]
    f, s = 0.4, 1000 / 800 - 1
    assert b["overlap_fraction"] == approx(f) and b["comm_fraction"] == approx(f)
    assert b["slowdown"] == approx(s)
    rho = (800 / 1000 - (1 - f)) / f  # 0.5: the overlapped 400 ns did 200 ns of isolated work
    assert b["in_overlap_slowdown"] == approx(1 / rho - 1) == 1.0
    assert b["corunner_sms"] == approx(20)  # averaged over the overlapped time
    assert b["sm_share"] == approx(20 * 400 / 1000 / S) and b["comm_sm_share"] == approx(0.08)
    # 50 CTAs (16 per SM) fit in the 80 free SMs: the SM model predicts no loss
    assert b["sm_predicted"] == 0 and b["explained"]["sm"] == 0
    assert b["significant"] is True and b["class"] == "unexplained"
    assert b["residual"] == approx(s)

    import traceql

    con = traceql.connect(root)
    [(comm_ns, dur, fr)] = con.sql("""SELECT comm_overlap_ns, dur_ns, comm_fraction FROM kernel_overlap
                                      WHERE start_ns = 10000""").fetchall()
    assert (comm_ns, dur, fr) == (400, 1000, approx(0.4))


# -- unions and exposure --------------------------------------------------------------------------

def _layout():
    """Nested, touching and disjoint intervals on one device.

    compute: C1 [0,100] with C2 [20,50] nested in it, C3 [100,150] touching C1, C4 [300,400] alone
    comm:    K1 [80,120] with K2 [90,110] nested, a peer copy P [150,200] touching C3, K3 [500,600] alone
    copy:    a device-to-device copy [350,700] and a memset [650,800] (neither is communication)
    """
    kernels = [dict(name="C1", start_ns=0, end_ns=100), dict(name="C2", start_ns=20, end_ns=50),
               dict(name="C3", start_ns=100, end_ns=150), dict(name="C4", start_ns=300, end_ns=400),
               dict(kind="comm", ctas=8, start_ns=80, end_ns=120), dict(kind="comm", ctas=4, start_ns=90, end_ns=110),
               dict(kind="comm", ctas=8, start_ns=500, end_ns=600)]
    memcpy = [dict(is_peer=True, start_ns=150, end_ns=200), dict(start_ns=350, end_ns=700)]
    memset = [dict(start_ns=650, end_ns=800)]
    return dict(kernels=kernels, memcpy=memcpy, memset=memset)


def test_union_and_exposure(tmp_path):
    res = _attr(tmp_path, **_layout())
    d = _device(res)
    u_comp = 150 + 100  # [0,150] u [300,400]
    u_comm = 40 + 50 + 100  # [80,120] u [150,200] u [500,600]
    both = 40  # [80,120]; [150,150] touches only
    assert (d["compute_ns"], d["comm_ns"], d["overlap_ns"]) == (u_comp, u_comm, both)
    assert d["exposed_comm_ns"] == u_comm - both == 150
    assert d["hidden_comm_fraction"] == approx(40 / 190)
    assert d["overlap_fraction"] == approx((20 + 0 + 20 + 0) / (100 + 30 + 50 + 100))
    assert (d["compute_kernels"], d["overlapped_kernels"]) == (4, 4)


def test_per_kernel_overlap_by_kind(tmp_path):
    import traceql

    root = make_store(tmp_path / "s", devices=DEV, **_layout())
    con = traceql.connect(root)
    got = {r[0]: r[1:] for r in con.sql("""SELECT name, comm_overlap_ns, compute_overlap_ns, copy_overlap_ns,
                                                  overlap_ns, corunner_kind FROM kernel_overlap""").fetchall()}
    assert got == {
        "C1": (20, 30, 0, 50, "compute"),  # comm [80,100], C2 [20,50]
        "C2": (0, 30, 0, 30, "compute"),
        "C3": (20, 0, 0, 20, "comm"),  # comm [100,120]; C1 and P only touch it
        "C4": (0, 0, 50, 50, "copy"),  # the copy [350,400]
    }


def test_non_communication_kernels_count_as_compute_time(tmp_path):
    """compute_ns is the union of all non-communication kernels (kinds compute, memory, other)."""
    kernels = [dict(name="fill", kind="memory", start_ns=0, end_ns=100),
               dict(name="mystery", kind="other", start_ns=50, end_ns=200),
               dict(kind="comm", ctas=8, start_ns=150, end_ns=300)]
    d = _device(_attr(tmp_path, kernels=kernels))
    assert (d["compute_ns"], d["comm_ns"], d["overlap_ns"], d["exposed_comm_ns"]) == (200, 150, 50, 100)
    assert d["compute_kernels"] == 2  # kind is a label: every kernel that is not communication counts


def test_compute_slowdown_is_ratio_of_sums(tmp_path):
    kernels = _store_a()  # A: 2 overlapped x 1500 ns, t0 1000
    kernels += _isolated("stencil_B", (30_000, 32_000, 34_000), 800, ctas=50)
    k, c = _beside_comm("stencil_B", 40_000, 1000, ctas=50)  # B: 1 overlapped x 1000 ns, t0 800
    kernels += k + c
    k, c = _beside_comm("orphan_C", 50_000, 5000)  # no isolated instance: no t0, left out of the sum
    kernels += k + c
    d = _device(_attr(tmp_path, kernels=kernels))
    assert d["compute_slowdown"] == approx((1500 + 1500 + 1000) / (1000 + 1000 + 800) - 1)
    assert (d["compute_kernels"], d["overlapped_kernels"]) == (10, 4)


# -- the SM wave model -----------------------------------------------------------------------------

# ctas -> (low, point, high) of the SM model with 20 of 100 SMs held, occupancy 1: the bracket between the
# throughput form S/(S-N) - 1 and the wave form ceil(B/(S-N))/ceil(B/S) - 1; the point is the wave form for a
# partial wave and the throughput form otherwise
T = 100 / 80 - 1
WAVE_CASES = {
    100: (T, T, math.ceil(100 / 80) / 1 - 1),  # persistent, one full wave: 2 waves on 80 SMs at worst
    50: (0.0, 0.0, 0.0),  # fits in the 80 free SMs
    85: (T, 1.0, 1.0),  # under one wave but not fitting: 2 waves instead of 1
    250: (T, T, math.ceil(250 / 80) / math.ceil(250 / 100) - 1),  # a few waves: 4 instead of 3
    1000: (T, T, math.ceil(1000 / 80) / math.ceil(1000 / 100) - 1),  # many waves
}


@pytest.fixture(scope="module")
def wave_rows(tmp_path_factory) -> dict:
    """One store with a victim signature per grid size (occupancy 1), each alone 3 x 1000 ns and once
    1300 ns inside a 20-CTA comm kernel."""
    kernels = []
    for n, ctas in enumerate(WAVE_CASES):
        base = n * 100_000
        kernels += _isolated(f"victim_{ctas}", (base, base + 2000, base + 4000), 1000, ctas=ctas, **ONE_PER_SM)
        k, c = _beside_comm(f"victim_{ctas}", base + 10_000, 1300, ctas=ctas, **ONE_PER_SM)
        kernels += k + c
    return _by_name(_attr(tmp_path_factory.mktemp("waves"), kernels=kernels))


@pytest.mark.parametrize(("ctas", "expected"), list(WAVE_CASES.items()))
def test_sm_wave_model(wave_rows, ctas, expected):
    a = wave_rows[f"victim_{ctas}"]
    assert a["occupancy"] == 1
    assert a["corunner_sms"] == approx(20)
    assert a["slowdown"] == approx(0.3)
    lo, point, hi = expected
    assert a["sm_predicted"] == approx(point)
    assert a["explained_interval"]["sm"] == [approx(lo), approx(hi)]
    assert a["explained"]["sm"] == approx(point) and a["residual"] == approx(0.3 - point)
    # the class needs the observed slowdown inside the prediction's interval
    assert a["class"] == ("sm" if lo <= 0.3 <= hi else "unexplained")


def test_corunners_holding_every_sm(tmp_path):
    """Co-runners on every SM: the victim's CTAs run beside theirs and share issue slots, from no loss to 2x."""
    kernels = _isolated("victim", (0, 2000), 1000, ctas=100, **ONE_PER_SM)
    k, c = _beside_comm("victim", 10_000, 1300, comm_ctas=100, ctas=100, **ONE_PER_SM)
    a = _by_name(_attr(tmp_path, kernels=kernels + k + c))["victim"]
    assert a["corunner_sms"] == approx(100) and a["sm_share"] == approx(1.0)
    assert a["sm_predicted"] == approx(0.5) and a["explained_interval"]["sm"] == [0, approx(1.0)]
    assert a["class"] == "sm"


def test_comm_sm_share_caps_at_sm_count_at_each_instant(tmp_path):
    """SM share = time-average of min(S, sum of comm CTAs)/S: two 80-CTA comm kernels over half the kernel."""
    kernels = [dict(name="victim", start_ns=0, end_ns=1000, ctas=10),
               dict(kind="comm", ctas=80, start_ns=0, end_ns=500), dict(kind="comm", ctas=80, start_ns=0, end_ns=500)]
    import traceql

    con = traceql.connect(make_store(tmp_path / "s", kernels=kernels, devices=DEV))
    [(share,)] = con.sql("SELECT comm_sm_share FROM kernel_overlap").fetchall()
    assert share == approx(min(S, 160) / S * 500 / 1000)


# -- co-runner kinds -------------------------------------------------------------------------------

@pytest.mark.parametrize(("is_peer", "kind"), [(False, "copy"), (True, "comm")])
def test_copy_engine_corunner_takes_no_sms(tmp_path, is_peer, kind):
    """A copy (not peer) is a 'copy' co-runner, a peer copy is communication; neither holds SMs."""
    kernels = _isolated("victim", (0, 2000, 4000), 1000, ctas=100, **ONE_PER_SM)
    kernels.append(dict(name="victim", start_ns=10_000, end_ns=11_300, ctas=100, **ONE_PER_SM))
    memcpy = [dict(is_peer=is_peer, start_ns=9_900, end_ns=11_400)]
    res = _attr(tmp_path, kernels=kernels, memcpy=memcpy)
    a = _by_name(res)["victim"]
    assert a["corunner_kind"] == kind
    assert a["comm_fraction"] == approx(1.0 if is_peer else 0.0)
    assert a["overlap_fraction"] == approx(1.0)
    assert a["corunner_sms"] == approx(0) and a["sm_share"] == approx(0) and a["comm_sm_share"] == approx(0)
    assert a["sm_predicted"] == 0 and a["explained"]["sm"] == 0
    assert a["class"] != "sm"
    d = _device(res)
    assert d["comm_ns"] == (1500 if is_peer else 0)
    assert ("no communication" in " ".join(res.notes)) is (not is_peer)


# -- baselines and significance --------------------------------------------------------------------

def test_no_isolated_instance(tmp_path):
    k, c = _beside_comm("orphan", 10_000, 1500)
    o = _by_name(_attr(tmp_path, kernels=k + c))["orphan"]
    assert o["t0_ns"] is None and o["slowdown"] is None and o["n_isolated"] == 0
    assert o["class"] == "none" and o["significant"] is False
    assert "baseline" in o["reason"]


def test_inside_the_baseline_spread_is_not_significant(tmp_path):
    kernels = [dict(name="noisy", start_ns=s, end_ns=s + d) for s, d in
               zip((0, 2000, 4000, 6000, 8000), (800, 900, 1000, 1100, 1200), strict=True)]
    k, c = _beside_comm("noisy", 20_000, 1150)
    n = _by_name(_attr(tmp_path, kernels=kernels + k + c))["noisy"]
    assert n["t0_ns"] == 1000 and n["t0_spread"] == approx((1100 - 900) / 1000)
    assert n["slowdown"] == approx(0.15)
    # one overlapped instance against the isolated ones' spread: [1150/1200 - 1, 1150/800 - 1]
    assert n["slowdown_lo"] == approx(1150 / 1200 - 1) and n["slowdown_hi"] == approx(1150 / 800 - 1)
    assert n["significant"] is False and n["class"] == "none"
    assert n["reason"] == "the slowdown interval includes 0 or stays under 1%"
    assert all(v == 0 for v in n["explained"].values())


def test_beyond_every_isolated_instance_is_significant(tmp_path):
    kernels = [dict(name="noisy", start_ns=s, end_ns=s + d) for s, d in
               zip((0, 2000, 4000, 6000, 8000), (800, 900, 1000, 1100, 1200), strict=True)]
    k, c = _beside_comm("noisy", 20_000, 1300)
    n = _by_name(_attr(tmp_path, kernels=kernels + k + c))["noisy"]
    assert n["slowdown"] == approx(0.3) and n["slowdown_lo"] == approx(1300 / 1200 - 1)
    assert n["significant"] is True


def test_never_overlapped_is_none(tmp_path):
    kernels = _isolated("alone", (0, 2000), 1000) + [dict(kind="comm", start_ns=5000, end_ns=6000)]
    a = _by_name(_attr(tmp_path, kernels=kernels))["alone"]
    assert a["n_overlapped"] == 0 and a["t1_ns"] is None and a["t0_ns"] == 1000
    assert a["class"] == "none" and a["reason"] == "never overlapped" and a["significant"] is False


def test_external_baseline(tmp_path):
    k, c = _beside_comm("orphan", 10_000, 1200)
    run = make_store(tmp_path / "run", kernels=k + c, devices=DEV)
    base = make_store(tmp_path / "base", kernels=_isolated("orphan", (0, 2000, 4000), 1000),
                      devices=DEV, run_id="ba5e000000000001")
    o = _by_name(attribute(run, baseline=base))["orphan"]
    assert o["t0_ns"] == 1000 and o["baseline"] == "baseline run" and o["slowdown"] == approx(0.2)
    assert o["n_isolated"] == 0  # in the trace itself
    other_gpu = make_store(tmp_path / "a100", kernels=_isolated("orphan", (0,), 1000), devices=DEV,
                           gpu_name="NVIDIA A100-SXM4-80GB", run_id="a100000000000001")
    with pytest.raises(BadInputError, match="same GPU model"):
        attribute(run, baseline=other_gpu)
    with pytest.raises(UsageError):
        attribute(run, baseline=run)


# -- factors from GPU metrics ------------------------------------------------------------------------

def _metric_windows(windows) -> list[dict]:
    """Samples every 50 ns inside each (start, end, {metric: value}) window."""
    rows = []
    for start, end, values in windows:
        for metric, value in values.items():
            rows += samples(metric, start, end, value, period_ns=50)
    return rows


READ, WRITE = "DRAM Read Bandwidth [Throughput %]", "DRAM Write Bandwidth [Throughput %]"
CLOCK, NVLINK = "GPC Clock Frequency [MHz]", "NVLink TX Requests User Data [Throughput %]"


def test_clock_factor(tmp_path):
    """A lower clock under overlap predicts f0/f1 - 1 for a kernel that does not wait on DRAM."""
    kernels = _isolated("victim", (0, 2000, 4000), 1000, ctas=100, **ONE_PER_SM)
    kernels.append(dict(name="victim", start_ns=10_000, end_ns=11_200, ctas=100, **ONE_PER_SM))
    memcpy = [dict(start_ns=9_900, end_ns=11_300)]  # a copy: no SMs
    metrics = _metric_windows([(s, s + 1000, {CLOCK: 1980, READ: 20}) for s in (0, 2000, 4000)]
                              + [(10_000, 11_200, {CLOCK: 1650, READ: 20 * 1000 / 1200})])
    a = _by_name(_attr(tmp_path, kernels=kernels, memcpy=memcpy, gpu_metrics=metrics))["victim"]
    assert a["gpc_clock_mhz_iso"] == approx(1980) and a["gpc_clock_mhz_ovl"] == approx(1650)
    assert a["slowdown"] == approx(0.2)
    assert a["explained"]["clock"] == approx(0.2)  # 1980/1650 - 1 = 0.2 explains all of it
    # how much of its time follows the clock is not measured: from no effect to the full effect
    assert a["explained_interval"]["clock"] == [0, approx(0.2)]
    assert a["residual"] == approx(0, abs=1e-9)
    assert a["class"] == "clock" and a["reason"] is None


def test_dram_bandwidth_factor(tmp_path):
    """Victim at 60% of DRAM peak alone beside a device-to-device copy whose bytes make 50% of peak
    (2 x bytes / duration / mem_bandwidth_Bps): combined demand 110%, e_dram = f·(110/90 - 1). Both sides
    move DRAM traffic and no extra bytes appear (measured 88% over t1 = 110% over t0), so the DRAM factor
    takes the rest of the loss too."""
    kernels = _isolated("add", (0, 2000, 4000), 1000, ctas=100, **ONE_PER_SM)
    kernels.append(dict(name="add", start_ns=10_000, end_ns=11_250, ctas=100, **ONE_PER_SM))
    copy_ns = 1450
    memcpy = [dict(start_ns=9_900, end_ns=9_900 + copy_ns, bytes=int(0.50 * 4.8e12 * copy_ns * 1e-9 / 2))]
    metrics = _metric_windows([(s, s + 1000, {READ: 40, WRITE: 20}) for s in (0, 2000, 4000)]
                              + [(10_000, 11_250, {READ: 60, WRITE: 28})])
    a = _by_name(_attr(tmp_path, kernels=kernels, memcpy=memcpy, gpu_metrics=metrics))["add"]
    assert a["dram_pct_iso"] == approx(60) and a["dram_pct_ovl"] == approx(88)
    assert a["co_dram_pct"] == approx(50, rel=1e-3)
    assert a["corunner_kind"] == "copy" and a["explained"]["sm"] == 0 and a["explained"]["cache"] == 0
    assert a["explained"]["dram_bw"] == approx(0.25, rel=1e-3)  # saturation (0.222) and queueing: all of s
    assert a["class"] == "dram_bw"


def test_dram_saturation_alone(tmp_path):
    """A victim that saturates DRAM alone (96%, the highest sustained rate: the device's saturation) beside a copy
    moving 9%: proportional sharing predicts (96 + 9)/96 - 1; getting only what the copy leaves of the 87.5% measured
    during the overlap predicts 96/(87.5 - 9) - 1; the demand over the measured rate, 105/87.5 - 1 = 0.2, lies
    between."""
    kernels = _isolated("add", (0, 2000, 4000), 1000, ctas=100, **ONE_PER_SM)
    kernels.append(dict(name="add", start_ns=10_000, end_ns=11_200, ctas=100, **ONE_PER_SM))
    memcpy = [dict(start_ns=9_900, end_ns=11_300, bytes=int(0.09 * 4.8e12 * 1400e-9 / 2))]  # 9% of peak
    metrics = _metric_windows([(s, s + 1000, {READ: 96}) for s in (0, 2000, 4000)]
                              + [(10_000, 11_200, {READ: 105 * 1000 / 1200})])  # no extra bytes
    a = _by_name(_attr(tmp_path, kernels=kernels, memcpy=memcpy, gpu_metrics=metrics))["add"]
    assert a["co_dram_pct"] == approx(9, rel=1e-3) and a["dram_sat_pct"] == approx(96)
    assert a["explained_interval"]["dram_bw"] == [approx((96 + 9) / 96 - 1, rel=1e-3),
                                                  approx(96 / (87.5 - 9) - 1, rel=1e-3)]
    assert a["explained"]["dram_bw"] == approx(0.2, rel=1e-3)
    assert a["explained"]["cache"] == 0 and a["explained"]["link"] == 0 and a["explained"]["sm"] == 0
    assert a["residual"] == approx(0, abs=1e-3)
    assert a["memory_bound"] is True and a["class"] == "dram_bw"


def _half_pair(corunner_alone_pct: float):
    """Two half-SM kernels: alone the victim moves 10% of DRAM peak and the co-runner ``corunner_alone_pct``;
    paired (the victim 2000 ns instead of 1000), the device moves 40%."""
    kernels = _isolated("half", (0, 2000, 4000), 1000, ctas=50, **ONE_PER_SM)
    kernels += _isolated("other_half", (6000, 8000), 1000, ctas=50, **ONE_PER_SM)
    kernels += [dict(name="half", start_ns=10_000, end_ns=12_000, ctas=50, **ONE_PER_SM),
                dict(name="other_half", start_ns=9_900, end_ns=12_100, ctas=50, **ONE_PER_SM)]
    metrics = _metric_windows([(s, s + 1000, {READ: 10}) for s in (0, 2000, 4000)]
                              + [(s, s + 1000, {READ: corunner_alone_pct}) for s in (6000, 8000)]
                              + [(10_000, 12_000, {READ: 40})])
    return kernels, metrics


def test_cache_factor(tmp_path):
    """The pair moves 40% x 2000 where the two alone would move 10% x 1000 + 10% x 1000: the victim's half of the
    extra 60000 costs 3x its own bytes at its own rate, 30000/(88 - 10)/1000 at the best rate the co-runner leaves:
    cache interference, between. The co-runner holds the other half of the SMs, which the SM model must not
    blame."""
    kernels, metrics = _half_pair(10)
    a = _by_name(_attr(tmp_path, kernels=kernels, gpu_metrics=metrics))["half"]
    assert a["corunner_kind"] == "compute" and a["corunner_sms"] == approx(50)
    assert a["sm_predicted"] == 0 and a["explained"]["sm"] == 0
    assert a["footprint"] is True and a["cache_evidence"] == "dram_bytes"
    # point (40 x 2000 - 20000)/2/10000 = 3 (the victim's half of the extra bytes); low: co-runner not stretched
    # (it moved 10% x 2000), at 88 - 10; high: 5% more measured traffic, all of it the victim's, at its own rate
    assert a["explained_interval"]["cache"] == [approx((0.95 * 80_000 - 30_000) / 2 / 78_000),
                                                approx((1.05 * 80_000 - 20_000) / 10_000)]
    assert a["explained"]["cache"] == approx(3.0) and a["agreement"] == "agrees"
    assert a["slowdown"] == approx(1.0) and a["class"] == "cache"


def test_no_cache_without_a_corunner_footprint(tmp_path):
    """The same extra traffic beside a co-runner that moves nothing alone (an SM-holding spin kernel) is not
    cache interference: nothing predicts the loss."""
    kernels, metrics = _half_pair(0.5)
    a = _by_name(_attr(tmp_path, kernels=kernels, gpu_metrics=metrics))["half"]
    assert a["footprint"] is False and a["cache_evidence"] is None and a["explained"]["cache"] == 0
    assert a["class"] == "unexplained"


def test_link_factor(tmp_path):
    """A peer copy beside another peer copy shares the link: up to twice as long while they overlap."""
    memcpy = [dict(is_peer=True, start_ns=s, end_ns=s + 1000, bytes=100_000) for s in (0, 2000, 4000)]
    memcpy += [dict(is_peer=True, start_ns=10_000, end_ns=11_300, bytes=100_000),
               dict(is_peer=True, start_ns=9_900, end_ns=11_400, bytes=50_000, stream_id=9)]
    metrics = _metric_windows([(s, s + 1000, {READ: 2, NVLINK: 30}) for s in (0, 2000, 4000)]
                              + [(10_000, 11_300, {READ: 2, NVLINK: 60})])
    far = [dict(name="elsewhere", start_ns=50_000, end_ns=51_000)]  # a trace needs kernels
    rows = _attr(tmp_path, kernels=far, memcpy=memcpy, gpu_metrics=metrics).to_json()["kernels"]
    [a] = [r for r in rows if r["bytes"] == 100_000]
    assert a["kind"] == "comm" and a["nvlink_pct_ovl"] == approx(60) and a["comm_fraction"] == approx(1.0)
    assert a["explained_interval"]["link"] == [0, approx(1.0)] and a["explained"]["link"] == approx(0.5)
    assert a["slowdown"] == approx(0.3) and a["class"] == "link"


# -- the JSON contract ---------------------------------------------------------------------------------

SUMMARY_KEYS = {"run_id", "device_id", "nvtx", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns",
                "hidden_comm_fraction", "overlap_fraction", "compute_slowdown", "compute_kernels",
                "overlapped_kernels"}
KERNEL_KEYS = {"run_id", "device_id", "nvtx", "group_id", "activity", "kind", "bytes", "mode", "split", "baseline",
               "t0_lo_ns", "t0_hi_ns", "t1_lo_ns", "t1_hi_ns", "slowdown_lo", "slowdown_hi", "baseline_drift",
               "conflated", "explained_interval",
               "name", "short_name", "grid", "block", "dynamic_smem_bytes", "n",
               "n_overlapped", "n_isolated", "t0_ns", "t0_spread", "t1_ns", "slowdown", "in_overlap_slowdown",
               "overlap_fraction", "comm_fraction", "sm_share", "comm_sm_share", "corunner_kind", "corunner_sms",
               "occupancy", "sm_predicted", "explained", "residual", "class", "significant", "reason",
               "dram_pct_iso", "dram_pct_ovl", "gpc_clock_mhz_iso", "gpc_clock_mhz_ovl", "sm_active_pct_iso",
               "sm_active_pct_ovl", "nvlink_pct_ovl", "pcie_pct_ovl", "co_dram_pct", "sum_t1_ns", "sum_t0_ns",
               "predicted", "predicted_lo", "predicted_hi", "agreement", "dram_sat_pct", "dram_busy", "memory_bound",
               "extra_bytes_frac", "footprint", "clock_power",
               # Nsight Compute witnesses (tests/test_attribute_ncu.py)
               "occupancy_source", "launch_occupancy", "ncu_match", "ncu_ctas_per_sm", "ncu_dram_pct", "ncu_l2_hit_pct",
               "ncu_working_set_bytes", "co_working_set_bytes", "l2_bytes", "cache_evidence"}


def test_json_contract(result_a):
    doc = result_a.to_json()
    json.dumps(doc)  # plain JSON types only
    assert set(doc) == {"schema_version", "runs", "summary", "kernels", "notes", "verdicts"}
    assert [v["device_id"] for v in doc["verdicts"]] == [0] and "saved" in doc["verdicts"][0]["text"]
    assert doc["schema_version"] == 2
    assert set(doc["runs"][0]) == {"run_id", "source_path", "format", "tool_version", "gpu_names"}
    assert all(set(r) == SUMMARY_KEYS for r in doc["summary"])
    assert all(set(r) == KERNEL_KEYS for r in doc["kernels"])
    assert set(doc["kernels"][0]["explained"]) == {"sm", "dram_bw", "cache", "clock", "link"}
    assert set(doc["kernels"][0]["explained_interval"]) == set(doc["kernels"][0]["explained"])
    # the documented column list and the contract agree
    columns = {c.strip() for c in KERNEL_COLUMNS.split(",")}
    intervals = {f"{f}_{end}" for f in FACTORS for end in ("lo", "hi")}
    assert columns - set(FACTORS) - intervals | {"explained", "explained_interval"} == KERNEL_KEYS
    for r in doc["kernels"]:
        assert r["class"] in {"sm", "dram_bw", "cache", "clock", "link", "mixed", "unexplained", "none", "conflated"}
        assert isinstance(r["significant"], bool)
        if r["slowdown"] is not None:  # the parts and the residual add up to the slowdown
            assert sum(r["explained"].values()) + r["residual"] == approx(r["slowdown"])


def test_focus_comm(tmp_path):
    kernels = _store_a() + _isolated("by_copy", (30_000, 32_000), 1000) + [
        dict(name="by_copy", start_ns=40_000, end_ns=41_500)]
    memcpy = [dict(start_ns=39_000, end_ns=42_000)]
    root = make_store(tmp_path / "s", kernels=kernels, memcpy=memcpy, devices=DEV)
    # every activity is a row: the copy and the NCCL kernels too
    assert {r["name"] for r in attribute(root).to_json()["kernels"]} == {"gemm_A", "by_copy", "[CUDA memcpy DtoD]",
                                                                         NCCL_NAME}
    assert {r["name"] for r in attribute(root, focus="comm").to_json()["kernels"]} == {"gemm_A"}
    with pytest.raises(UsageError):
        attribute(root, focus="everything")


# -- NVTX groups via the launching thread -------------------------------------------------------------

PID_A, PID_B = 1 << 24, 2 << 24


def test_group_by_nvtx_follows_the_launching_thread(tmp_path):
    """Kernels join the innermost matching range of the thread that launched them, found through
    runtime_api (global_pid, correlation_id) -> global_tid; another process's API call with the same
    correlation id, and its ranges, must not capture the kernel."""
    a1, a2, b1 = PID_A + 11, PID_A + 12, PID_B + 21
    kernels = [
        dict(name="k_inner", global_pid=PID_A, correlation_id=5, start_ns=1000, end_ns=2000),
        dict(name="k_outer", global_pid=PID_A, correlation_id=6, start_ns=4100, end_ns=4200),
        dict(name="k_free", global_pid=PID_A, correlation_id=7, start_ns=6100, end_ns=6200),
        dict(name="k_other_process", global_pid=PID_B, device_id=1, correlation_id=5, start_ns=1000, end_ns=1800),
    ]
    runtime_api = [
        dict(global_pid=PID_A, global_tid=a1, correlation_id=5, start_ns=900),
        dict(global_pid=PID_A, global_tid=a1, correlation_id=6, start_ns=4000),
        dict(global_pid=PID_A, global_tid=a1, correlation_id=7, start_ns=6000),
        dict(global_pid=PID_B, global_tid=b1, correlation_id=5, start_ns=900),
    ]
    nvtx = [
        dict(global_pid=PID_A, global_tid=a1, text="case:outer", start_ns=0, end_ns=5000, depth=0),
        dict(global_pid=PID_A, global_tid=a1, text="case:inner;x=1", start_ns=500, end_ns=1500, depth=1),
        dict(global_pid=PID_A, global_tid=a1, text="step 3", start_ns=800, end_ns=1000, depth=2),  # no match
        dict(global_pid=PID_A, global_tid=a2, text="case:other_thread", start_ns=850, end_ns=1200),
        dict(global_pid=PID_B, global_tid=b1, text="case:wrong_process", start_ns=880, end_ns=3000),
    ]
    devices = [dict(device_id=0, sm_count=S), dict(device_id=1, sm_count=S)]
    root = make_store(tmp_path / "s", kernels=kernels, runtime_api=runtime_api, nvtx=nvtx, devices=devices)
    groups = {r["name"]: r["nvtx"] for r in attribute(root, group_by_nvtx="case:*").to_json()["kernels"]}
    assert groups == {"k_inner": "case:inner;x=1", "k_outer": "case:outer", "k_free": None,
                      "k_other_process": "case:wrong_process"}
    # without grouping there is no nvtx column content
    assert {r["nvtx"] for r in attribute(root).to_json()["kernels"]} == {None}
    # the glob selects the ranges: "step*" finds only the innermost range around k_inner's launch
    groups = {r["name"]: r["nvtx"] for r in attribute(root, group_by_nvtx="step*").to_json()["kernels"]}
    assert groups["k_inner"] == "step 3" and groups["k_outer"] is None


def test_group_rows_in_summary(tmp_path):
    kernels = _isolated("gemm_A", (0, 2000, 4000), 1000, ctas=8000)
    k, c = _beside_comm("gemm_A", 10_000, 1500, ctas=8000)
    kernels += k + c
    kernels = [dict(kk, correlation_id=i + 1) for i, kk in enumerate(kernels)]
    compute = [kk for kk in kernels if kk.get("kind") != "comm"]
    nvtx = [dict(text="case:alone", start_ns=-100, end_ns=5000), dict(text="case:beside", start_ns=9000,
                                                                       end_ns=12_000)]
    res = _attr(tmp_path, kernels=kernels, runtime_api=launches(compute), nvtx=nvtx,
                attribute_kwargs=dict(group_by_nvtx="case:*"))
    rows = _by_name(res, nvtx=True)
    beside = rows[("gemm_A", "case:beside")]
    assert beside["t0_ns"] == 1000 and beside["slowdown"] == approx(0.5)  # t0 from the other group's instances
    assert rows[("gemm_A", "case:alone")]["n_overlapped"] == 0
    groups = {r["nvtx"]: r for r in res.to_json()["summary"] if r["nvtx"] is not None}
    assert groups["case:beside"]["compute_ns"] == 1500 and groups["case:beside"]["overlap_ns"] == 1500
    assert groups["case:beside"]["comm_ns"] is None and groups["case:beside"]["compute_slowdown"] == approx(0.5)
    assert groups["case:alone"]["compute_ns"] == 3000 and groups["case:alone"]["overlapped_kernels"] == 0


# -- the CLI ---------------------------------------------------------------------------------------

@pytest.fixture
def store_a(tmp_path) -> Path:
    return make_store(tmp_path / "a", kernels=_store_a(), devices=DEV)


def test_cli_json(store_a):
    rc, out, err = run_cli("attribute", store_a, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 2 and doc["kernels"][0]["name"] == "gemm_A"
    assert doc["kernels"][0]["class"] == "unexplained"  # SM predicts 0.25 [0.25, 0.4] of the observed 0.5


def test_cli_table_and_csv(store_a, tmp_path):
    rc, out, err = run_cli("attribute", store_a, "-o", tmp_path / "out")
    assert rc == 0, err
    assert "gemm_A" in out
    assert json.loads((tmp_path / "out" / "attribution.json").read_text())["kernels"][0]["name"] == "gemm_A"
    rc, out, err = run_cli("attribute", store_a, "--format", "csv")
    assert rc == 0 and out.splitlines()[0].startswith('"run_id","device_id"')


def test_cli_max_slowdown_gate(store_a):
    rc, _, err = run_cli("attribute", store_a, "--format", "json", "--max-slowdown", "0.1")
    assert rc == 1 and "compute slowdown above" in err
    rc, _, err = run_cli("attribute", store_a, "--format", "json", "--max-slowdown", "0.6")
    assert rc == 0, err


def test_cli_contradictory_options(store_a):
    rc, out, err = run_cli("attribute", store_a, "--baseline", store_a)
    assert rc == 2 and "baseline" in err and "Traceback" not in err
    rc, _, err = run_cli("attribute", store_a, "--format", "yaml")
    assert rc == 2 and "--format" in err
    rc, _, err = run_cli("attribute", store_a, "--focus", "everything")
    assert rc == 2 and "focus" in err


def test_cli_no_comm_note(tmp_path):
    kernels = _isolated("k", (0, 2000), 1000) + [dict(name="k", start_ns=3000, end_ns=4500),
                                                   dict(name="other", start_ns=3100, end_ns=4000)]
    root = make_store(tmp_path / "s", kernels=kernels, devices=DEV)
    rc, out, err = run_cli("attribute", root, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert any("no communication" in n for n in doc["notes"])
    [k] = [r for r in doc["kernels"] if r["name"] == "k"]
    assert k["corunner_kind"] == "compute" and k["comm_fraction"] == 0


def test_cli_store_without_kernels(tmp_path):
    root = make_store(tmp_path / "s", nvtx=[dict(text="case:x", start_ns=0, end_ns=10)])
    rc, out, err = run_cli("attribute", root, "--format", "json")
    assert rc == 2 and out == ""
    assert "no CUDA kernels" in err and str(root) in err and "Traceback" not in err
    with pytest.raises(BadInputError):
        attribute(root)
