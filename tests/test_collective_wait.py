"""Idle inside collectives: waiting for the last rank (issue 28 part 2; docs/definitions.md#collective-wait).

Every expected value is worked out by hand here from the synthetic ranks' kernel times, or, on the team's real
2-GPU NCCL export, by a plain second computation over its kernel rows read with the stdlib sqlite3.
"""
from __future__ import annotations

import re
import sqlite3

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from pipeline.analysis import collwait
from pipeline.config import ConfigError, config_from_dict
from pipeline.store.results import config_hash
from pipeline.synth import ExportWriter
from helpers.fixes import read_fixes

MS = 1_000_000
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def calls(*kernels) -> collwait.RankCalls:
    """RankCalls of (start, end, name) kernels, every one a collective."""
    s, e, n = zip(*kernels)
    return collwait.rank_calls(s, e, n, [True] * len(s))


# -- the definition, by hand ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, fam", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "AllReduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "AllReduce"),
    ("void ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "SendRecv"),
    ("ncclDevKernel_SendRecv", "SendRecv"),
    ("ncclDevKernel_AllGather_RING_LL", "AllGather"),
    ("void cross_device_reduce_2stage<float, 8>(RankData*, RankSignals, float*, int)", "cross_device_reduce_2stage"),
])
def test_kernel_family(name, fam):
    assert collwait.family(name) == fam


def test_one_rank_late_by_a_known_amount_in_every_call():
    """Rank b enters 2 ns after rank a in each of 3 calls; both end together 2 ns later: a waits 2 and transfers 2
    per call, b waits 0 and transfers 2; b is last in every call."""
    a = calls((10, 14, ALLREDUCE), (30, 34, ALLREDUCE), (50, 54, ALLREDUCE))
    b = calls((12, 14, ALLREDUCE), (32, 34, ALLREDUCE), (52, 54, ALLREDUCE))
    m = collwait.match({"a": a, "b": b})
    assert not m.abstained and "AllReduce ×3" in m.note and not m.p2p
    assert m.last["a"].tolist() == [12, 32, 52] == m.last["b"].tolist()
    assert collwait.gpu_wait(a, m.last["a"], m.is_last["a"], 0, 100) == (12, 6, 6, 3, 0)
    assert collwait.gpu_wait(b, m.last["b"], m.is_last["b"], 0, 100) == (6, 0, 6, 3, 3)
    assert collwait.is_chronic(3, 3, 0.5) and not collwait.is_chronic(0, 3, 0.5)


def test_the_late_rank_alternating_is_transient():
    """Four calls, the late rank alternating a, b, a, b: each last in 2 of 4 (not more than half): transient."""
    a = calls(*[(10 * i + (2 if i % 2 == 0 else 0), 10 * i + 5, ALLREDUCE) for i in range(4)])
    b = calls(*[(10 * i + (0 if i % 2 == 0 else 2), 10 * i + 5, ALLREDUCE) for i in range(4)])
    m = collwait.match({"a": a, "b": b})
    wa = collwait.gpu_wait(a, m.last["a"], m.is_last["a"], 0, 100)
    wb = collwait.gpu_wait(b, m.last["b"], m.is_last["b"], 0, 100)
    # a: waits 2 in calls 1 and 3 (it entered at 10i, b at 10i + 2), none in 0 and 2 (it was last)
    assert (wa.wait_ns, wa.transfer_ns, wa.last_count) == (4, 12, 2)
    assert (wb.wait_ns, wb.transfer_ns, wb.last_count) == (4, 12, 2)
    assert not collwait.is_chronic(2, 4, 0.5)
    assert collwait.job_late_rank(["a", "b"], [2, 2], [False, False]) == ("a", "transient")
    assert collwait.job_late_rank(["a", "b"], [1, 3], [False, True]) == ("b", "chronic")
    assert collwait.job_late_rank(["a", "b"], [0, 0], [False, False]) == ("", "")


def test_unequal_counts_or_families_abstain_with_the_reason():
    a = calls((10, 14, ALLREDUCE), (30, 34, ALLREDUCE))
    b = calls((12, 14, ALLREDUCE))
    m = collwait.match({"a": a, "b": b})
    assert m.abstained and "a ran AllReduce ×2, b ran AllReduce ×1" in m.note
    g = calls((12, 14, "ncclDevKernel_AllGather_RING_LL"), (32, 34, "ncclDevKernel_AllGather_RING_LL"))
    assert "b ran AllGather ×2" in collwait.match({"a": a, "b": g}).note
    alone = collwait.match({"a": a})
    assert alone.abstained and alone.note.startswith("ranks in separate reports: their clocks are not known to agree")
    # a capture naming 4 ranks of which the report holds 2: the other two are elsewhere
    assert collwait.match({"a": a, "b": calls((12, 14, ALLREDUCE), (32, 34, ALLREDUCE))}, world_size=4).abstained
    # abstained: the GPU's collective time and calls are still given, the wait and transfer are not
    row = collwait.gpu_columns(m, "a", 0, 100, 0.5)
    assert (row["collective_ns"], row["collective_calls"], row["collective_wait_status"]) == (8, 2, "abstained")
    assert row["collective_wait_ns"] is None   # missing, not NaN
    assert "collective_wait_usd_per_month" not in row   # price-free: the fleet's pricing gives the dollars


def test_a_collective_clipped_by_the_window_edge():
    """W = [11, 53). Call 1: a [10, 14), b [12, 14), last 12: a waits [10, 12) ∩ W = 1, transfers 2; call 3: a
    [50, 54) waits [50, 52) = 2, transfers [52, 54) ∩ W = 1; b [52, 54) transfers 1. Call 2 wholly inside. A call
    wholly outside W (call 4 at 70) counts nowhere. wait + transfer = |kernel ∩ W| exactly."""
    a = calls((10, 14, ALLREDUCE), (30, 34, ALLREDUCE), (50, 54, ALLREDUCE), (70, 74, ALLREDUCE))
    b = calls((12, 14, ALLREDUCE), (32, 34, ALLREDUCE), (52, 54, ALLREDUCE), (72, 74, ALLREDUCE))
    m = collwait.match({"a": a, "b": b})
    wa = collwait.gpu_wait(a, m.last["a"], m.is_last["a"], 11, 53)
    assert wa == (3 + 4 + 3, 1 + 2 + 2, 2 + 2 + 1, 3, 0)
    wb = collwait.gpu_wait(b, m.last["b"], m.is_last["b"], 11, 53)
    assert wb == (2 + 2 + 1, 0, 5, 3, 3)
    # a call that starts before W and is waited out before w0: no wait inside W, transfer only
    assert collwait.gpu_wait(a, m.last["a"], m.is_last["a"], 12, 53)[:3] == (2 + 4 + 3, 0 + 2 + 2, 2 + 2 + 1)


def test_the_setting_is_checked_and_keys_stored_results():
    assert config_from_dict({}).collective.chronic_share == 0.5
    for bad in (-0.1, 1.5, "most"):
        with pytest.raises(ConfigError, match="collective"):
            config_from_dict({"collective": {"chronic_share": bad}})
    assert config_hash(config_from_dict({})) != config_hash(config_from_dict({"collective": {"chronic_share": 0.7}}))


# -- two communicators on the same ranks, on two streams ------------------------------------------------------------

AR = ALLREDUCE


def two_communicators():
    """Ranks a (process 10, streams 20 and 24) and b (process 11, streams 30 and 34: other ids, same order) each run a
    data-parallel all-reduce (DP) on their first stream and a tensor-parallel one (TP) on their second, interleaved in
    a different order: a issues DP first (D1 10, T1 12, D2 50, T2 52), b TP first (T1 8, D1 14, T2 48, D2 53)."""
    a = collwait.rank_calls([10, 50, 12, 52], [20, 60, 22, 62], [AR] * 4, [True] * 4, [10] * 4, [20, 20, 24, 24])
    b = collwait.rank_calls([14, 53, 8, 48], [20, 60, 22, 62], [AR] * 4, [True] * 4, [11] * 4, [30, 30, 34, 34])
    return a, b


def test_two_communicators_on_two_streams_are_not_cross_matched():
    """Per stream, by hand (W = [0, 100)): D1 last 14, D2 last 53, T1 last 12, T2 last 52.
    a: D1 [10, 20) waits 4, transfers 6; D2 [50, 60) waits 3, transfers 7; T1, T2 it is last: transfers 10 + 10.
    b: D1, D2 it is last: transfers 6 + 7; T1 [8, 22) waits 4, transfers 10; T2 [48, 62) waits 4, transfers 10.
    The k-th AllReduce by start alone would pair a's D1 with b's T1 (a waits 0 + 2 + 0 + 1 = 3, not 7)."""
    a, b = two_communicators()
    assert a.streams.tolist() == [0, 1, 0, 1] and b.streams.tolist() == [1, 0, 1, 0]    # a: 10 12 50 52; b: 8 14 48 53
    m = collwait.match({"a": a, "b": b})
    assert not m.abstained and m.basis == "kth call of family"
    assert m.note.endswith("calls matched by the k-th kernel of each family on each collective stream (numbered by "
                           "process and stream id on each GPU): stream 1: AllReduce ×2, stream 2: AllReduce ×2")
    assert m.last["a"].tolist() == [14, 12, 53, 52] and m.last["b"].tolist() == [12, 14, 52, 53]
    assert collwait.gpu_wait(a, m.last["a"], m.is_last["a"], 0, 100) == (40, 7, 33, 4, 2)
    assert collwait.gpu_wait(b, m.last["b"], m.is_last["b"], 0, 100) == (41, 8, 33, 4, 2)
    # the same kernels on one stream each: matched by start order alone, the cross-match the streams prevent
    one = {k: collwait.rank_calls(v.starts, v.ends, [AR] * 4, [True] * 4) for k, v in (("a", a), ("b", b))}
    crossed = collwait.match(one)
    assert collwait.gpu_wait(one["a"], crossed.last["a"], crossed.is_last["a"], 0, 100).wait_ns == 0 + 2 + 0 + 1


def test_a_different_number_of_collective_streams_abstains():
    """b runs its four all-reduces on one stream, a on two: the communicators cannot be paired; abstain, saying so."""
    a, b = two_communicators()
    b1 = collwait.rank_calls(b.starts, b.ends, [AR] * 4, [True] * 4, [11] * 4, [30] * 4)
    m = collwait.match({"a": a, "b": b1})
    assert m.abstained
    assert m.note == ("calls disagree between GPUs: a ran stream 1: AllReduce ×2, stream 2: AllReduce ×2, "
                      "b ran AllReduce ×4; not matched")
    assert m.basis == "abstained: " + m.note
    assert collwait.gpu_columns(m, "a", 0, 100, 0.5)["collective_match_basis"] == "abstained: " + m.note
    # no collective in W: no basis
    assert collwait.gpu_columns(m, "a", 200, 300, 0.5)["collective_match_basis"] == ""


def test_cli_two_communicators_on_two_streams(tmp_path):
    """The two-communicator ranks in ms, in one export (a on device 0, b on device 1), a gemm [0, 8) ms and
    [62, 100) ms on each rank's stream 7 so that W = [0, 100) ms on both: the figures of the hand computation above."""
    w = ExportWriter(str(tmp_path / "tp_dp.sqlite"))
    for dev, pid, kernels in ((0, 10, [(10, 20, 20), (50, 60, 20), (12, 22, 24), (52, 62, 24)]),
                              (1, 11, [(14, 20, 30), (53, 60, 30), (8, 22, 34), (48, 62, 34)])):
        w.kernel(pid=pid, device=dev, stream=7, start=0, end=8 * MS, name="gemm")
        w.kernel(pid=pid, device=dev, stream=7, start=62 * MS, end=100 * MS, name="gemm")
        for s, e, stream in kernels:
            w.kernel(pid=pid, device=dev, stream=stream, start=s * MS, end=e * MS, name=AR)
    w.close()
    _, fleet, jobs = run_folder(tmp_path, "tpdp", tmp_path / "tp_dp.sqlite")
    assert fleet["window_ns"].astype("int64").tolist() == [100 * MS] * 2
    got = fleet[["collective_ns", "collective_wait_ns", "collective_transfer_ns", "collective_calls",
                 "collective_last_count"]].astype("int64").values.tolist()
    assert got == [[40 * MS, 7 * MS, 33 * MS, 4, 2], [41 * MS, 8 * MS, 33 * MS, 4, 2]]
    assert fleet["collective_match_basis"].tolist() == ["kth call of family"] * 2
    assert int(jobs.iloc[0]["collective_wait_ns"]) == 15 * MS


# -- through the CLI, on synthetic ranks in one report -------------------------------------------------------------

def ranks_export(path: str, late: list[int], n_ranks: int = 2, drop_last_on: int | None = None) -> str:
    """``n_ranks`` processes (pid 10 + r) on devices r of one export; iteration i (10 ms each, from 0): a ``gemm``
    on every rank from 10i ms until it enters the all-reduce, at 10i + 4 ms, or 10i + 6 ms on the late rank
    ``late[i]``; every rank's all-reduce ends at 10i + 8 ms. ``drop_last_on``: that rank lacks the last call."""
    w = ExportWriter(path)
    for i, who in enumerate(late):
        t = 10 * i * MS
        for r in range(n_ranks):
            enter = t + (6 if r == who else 4) * MS
            w.kernel(pid=10 + r, device=r, stream=7, start=t, end=enter, name="gemm")
            if not (r == drop_last_on and i == len(late) - 1):
                w.kernel(pid=10 + r, device=r, stream=20, start=enter, end=t + 8 * MS, name=ALLREDUCE)
    return w.close()


def run_folder(tmp_path, name: str, *paths, args=()) -> tuple:
    out = tmp_path / name
    run_cli("run", *map(str, paths), "--out", str(out), "--window", "span", "--no-cache", *args)
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).sort_values("device_id").reset_index(drop=True)
    jobs = pd.read_csv(out / "jobs.csv", keep_default_na=False)
    return out, fleet, jobs


def test_cli_one_rank_late_in_every_call(tmp_path):
    """5 calls, rank 1 enters 2 ms after rank 0 in each. W (span) = [0, 48 ms) on both. Rank 0: collective 5 × 4 ms,
    wait 5 × 2, transfer 5 × 2; rank 1: collective 5 × 2, wait 0, transfer 10 ms, last in all 5 (chronic)."""
    out, fleet, jobs = run_folder(tmp_path, "late", ranks_export(str(tmp_path / "late.sqlite"), [1] * 5))
    assert fleet["window_ns"].tolist() == [48 * MS, 48 * MS]
    got = fleet[["collective_ns", "collective_wait_ns", "collective_transfer_ns", "collective_calls",
                 "collective_last_count"]].astype("int64").values.tolist()
    assert got == [[20 * MS, 10 * MS, 10 * MS, 5, 0], [10 * MS, 0, 10 * MS, 5, 5]]
    assert fleet["collective_wait_pct"].tolist() == [20.8333, 0.0]              # 100 × 10 / 48
    assert fleet["collective_wait_status"].tolist() == ["measured", "measured"]
    assert fleet["collective_chronic"].tolist() == [False, True]
    assert fleet["collective_p2p"].tolist() == [False, False]
    r0 = fleet.iloc[0]
    assert float(r0["collective_wait_usd_per_month"]) == round(10 / 48 * float(r0["rate_usd_per_hour"]) * 730, 2)
    # beside the device-level idle, never in it: the idle is the gemm-to-gemm holes only (2 ms per iteration but
    # the last), priced by itself
    assert int(r0["idle_ns"]) == 4 * 2 * MS
    assert float(r0["idle_usd_per_month"]) == round(8 / 48 * float(r0["rate_usd_per_hour"]) * 730, 2)
    job = jobs.iloc[0]
    assert int(job["collective_wait_ns"]) == 10 * MS and float(job["collective_wait_pct"]) == 10.4167  # of 96 ms
    assert int(job["collective_measured_gpus"]) == 2
    assert (job["collective_late_rank"], job["collective_late_rank_kind"]) == (fleet.iloc[1]["gpu_key"], "chronic")
    assert job["collective_wait_kind"] == "collective wait"
    # matched by the k-th call of each family (one collective stream per GPU): said per GPU and per job
    assert fleet["collective_match_basis"].tolist() == ["kth call of family"] * 2
    assert job["collective_match_basis"] == "kth call of family"


def test_cli_the_late_rank_cycling_is_transient(tmp_path):
    """3 ranks, 7 calls, the late rank 0, 1, 2, 0, 1, 2, 0: rank 0 last 3 times (3/7, not most): the late rank,
    transient. The on-time ranks wait 2 ms per call: rank 0 waits in 4 calls, ranks 1 and 2 in 5."""
    _, fleet, jobs = run_folder(tmp_path, "cyc", ranks_export(str(tmp_path / "cyc.sqlite"), [0, 1, 2, 0, 1, 2, 0], 3))
    assert fleet["collective_wait_ns"].astype("int64").tolist() == [8 * MS, 10 * MS, 10 * MS]
    assert fleet["collective_transfer_ns"].astype("int64").tolist() == [14 * MS] * 3
    assert fleet["collective_last_count"].astype("int64").tolist() == [3, 2, 2]
    assert fleet["collective_chronic"].tolist() == [False] * 3
    job = jobs.iloc[0]
    assert (job["collective_late_rank"], job["collective_late_rank_kind"]) == (fleet.iloc[0]["gpu_key"], "transient")


def test_cli_unequal_counts_abstain(tmp_path):
    _, fleet, jobs = run_folder(tmp_path, "uneq", ranks_export(str(tmp_path / "uneq.sqlite"), [1] * 5, drop_last_on=1))
    assert fleet["collective_wait_status"].tolist() == ["abstained", "abstained"]
    note = fleet.iloc[0]["collective_wait_note"]
    assert "AllReduce ×5" in note and "AllReduce ×4" in note and "not matched" in note
    assert fleet["collective_wait_ns"].tolist() == ["", ""] and fleet["collective_last_count"].tolist() == ["", ""]
    assert fleet["collective_calls"].astype("int64").tolist() == [5, 4]
    assert fleet["collective_match_basis"].tolist() == ["abstained: " + note] * 2
    assert jobs.iloc[0]["collective_match_basis"] == "abstained: " + note     # one distinct basis, said once
    assert int(jobs.iloc[0]["collective_measured_gpus"]) == 0 and jobs.iloc[0]["collective_late_rank"] == ""


def test_cli_ranks_in_separate_reports_abstain(tmp_path):
    """The same job's two ranks in two files: their clocks are not known to agree, so no call is matched."""
    for r in (0, 1):
        w = ExportWriter(str(tmp_path / f"job_rank{r}.sqlite"))
        for i in range(3):
            t = 10 * i * MS
            w.kernel(pid=10 + r, device=0, stream=7, start=t, end=t + 4 * MS, name="gemm")
            w.kernel(pid=10 + r, device=0, stream=20, start=t + 4 * MS, end=t + 8 * MS, name=ALLREDUCE)
        w.close()
    cfg = tmp_path / "labels.yaml"
    cfg.write_text("labels:\n  - {match: '*job_rank*', cluster: lab, job: split}\n")
    _, fleet, jobs = run_folder(tmp_path, "split", tmp_path / "job_rank0.sqlite", tmp_path / "job_rank1.sqlite",
                                args=("--config", str(cfg)))
    assert fleet["collective_wait_status"].tolist() == ["abstained", "abstained"]
    # not measured: the job's wait has no dollars (empty, like its share), never $0.00
    [job] = jobs.to_dict("records")
    assert (job["collective_measured_gpus"], job["collective_wait_pct"], job["collective_wait_usd_per_month"]) == (0, "", "")
    # the files name no host and state no capture start (each counts from its earliest row: not a host's clock, so
    # not even a node label would put them on one), so the job's step across files cannot match them either
    # (tests/test_collective_wait_files.py)
    assert fleet["collective_wait_note"].tolist() == [
        "ranks in separate reports: host unknown for job_rank0.sqlite and 1 more file(s) (the export names no host, "
        "and the rows are not timed on the host's clock (their zero: the report's earliest timestamp (the export "
        "states no capture start))): the files' clocks are not known to agree"] * 2


def test_cli_a_collective_clipped_by_the_trimmed_window(tmp_path):
    """--trim 0.005 0.045 s: W = [5, 45) ms on both ranks of the late export. Rank 0's first call [4, 8) ms (last
    6): waits [5, 6) = 1 ms, transfers 2; its last [44, 48): waits [44, 45) = 1, transfers 0; calls 1-3 whole
    (2 + 2 each). Rank 1's last call [46, 48) lies outside W: 4 calls, transfer 2 ms each."""
    path = ranks_export(str(tmp_path / "late.sqlite"), [1] * 5)
    _, fleet, _ = run_folder(tmp_path, "trim", path, args=("--trim", "0.005", "0.045"))
    got = fleet[["window_ns", "collective_ns", "collective_wait_ns", "collective_transfer_ns", "collective_calls",
                 "collective_last_count"]].astype("int64").values.tolist()
    assert got == [[40 * MS, 16 * MS, 8 * MS, 8 * MS, 5, 0], [40 * MS, 8 * MS, 0, 8 * MS, 4, 4]]


# -- the team's real 2-GPU NCCL export -----------------------------------------------------------------------------

def plain_waits(path) -> dict:
    """device -> [(start, end, last)] of its NCCL kernels, in plain Python: each device's ``nccl`` kernel rows in
    start order, the k-th of one device paired with the k-th of the other (one family here: SendRecv), last = the
    later of the two starts."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT k.deviceId, k.start, k.end, s.value, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.shortName ORDER BY k.start, k.end").fetchall()
    finally:
        con.close()
    per, streams = {}, {}
    for dev, s, e, name, stream in rows:
        if name.startswith("nccl"):
            per.setdefault(dev, []).append((s, e, name))
            streams.setdefault(dev, set()).add(stream)
    # one NCCL stream per device: the k-th call of the family on the one collective stream is the k-th overall
    assert {d: len(v) for d, v in streams.items()} == {0: 1, 1: 1}
    assert sorted(per) == [0, 1] and len(per[0]) == len(per[1])
    assert {n for d in per for _, _, n in per[d]} == {"ncclDevKernel_SendRecv"}
    lasts = [max(a[0], b[0]) for a, b in zip(per[0], per[1])]
    return {d: [(s, e, last) for (s, e, _), last in zip(per[d], lasts)] for d in per}


def test_real_two_gpu_nccl_export(profiles, tmp_path):
    path = profiles / "train_h100_2gpu_nccl.sqlite"
    out = tmp_path / "nccl"
    run_cli("run", str(path), "--out", str(out), "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert len(fleet) == 2
    plain = plain_waits(path)
    for r in fleet.itertuples():
        w0, w1 = int(r.window_start_ns), int(r.window_end_ns)
        wait = transfer = total = n = last_count = 0
        for s, e, last in plain[int(r.device_id)]:
            inside = max(0, min(e, w1) - max(s, w0))
            total += inside
            wait += max(0, min(min(e, last), w1) - max(s, w0))
            transfer += max(0, min(e, w1) - max(max(s, last), w0))
            n += inside > 0
            last_count += inside > 0 and s == last
        assert r.collective_wait_status == "measured"
        assert r.collective_match_basis == "kth call of family"
        assert (int(r.collective_wait_ns), int(r.collective_transfer_ns), int(r.collective_ns)) == (wait, transfer, total)
        assert (int(r.collective_calls), int(r.collective_last_count)) == (n, last_count)
        assert wait > 0 and transfer > 0
        # the export's all_to_all is made of send/recv kernels: NVTX names the collective, so it is no pipeline bubble
        assert r.collective_p2p is False or str(r.collective_p2p) == "False"
    assert int(fleet["collective_calls"].sum()) > 0
    assert np.isclose(fleet["collective_wait_pct"].astype(float),
                      (100.0 * fleet["collective_wait_ns"].astype(float) / fleet["window_ns"]).round(4)).all()


# -- where it shows: records, the Markdown summary, the HTML report (fix first, its own section), the GPU pages ----

def test_cli_the_figures_are_shown_apart_from_the_idle(tmp_path):
    """The late export (rank 1 last in all 5 calls): rank 0 waits 10 ms of 48, the job 10 ms of 96 (10.42 %)."""
    out, fleet, _ = run_folder(tmp_path, "views", ranks_export(str(tmp_path / "views.sqlite"), [1] * 5))
    usd = float(fleet.iloc[0]["collective_wait_usd_per_month"])
    rate = float(fleet.iloc[0]["rate_usd_per_hour"])
    assert usd == round(10 / 48 * rate * 730, 2)                        # rank 1 waited nothing: $0.00
    # fix_first.csv: the entry in its own section after the device-idle ones, of the fleet and of the job
    fixes = read_fixes(out / "fix_first.csv")
    coll = fixes[fixes["section"] == "inside collectives"]
    assert list(coll["scope"]) == ["fleet", "job"] and set(coll["category"]) == {"collective wait"}
    assert list(coll["collective_wait_usd_per_month"]) == [usd, usd] and coll["idle_usd_per_month"].isna().all() and list(coll["share_pct"]) == [10.4167] * 2   # 10 of 96 ms
    assert set(coll["diagnosis"]) == {f"late rank: GPU #2 {fleet.iloc[1]['gpu_key']} (chronic: last in 5 of 5 calls)"}
    idle = fixes[fixes["section"] == "device idle"]
    assert round(idle.loc[idle["scope"] == "fleet", "idle_usd_per_month"].sum(), 2) == round(sum(
        float(r[f"fix_{c}_usd_per_month"]) for r in fleet.to_dict("records") for c in
        ("sync", "data", "comm", "boundary", "periodic", "launch", "cpu")), 2)
    record = "\n".join(p.read_text() for p in (out / "records").glob("*.md"))
    # the export names no GPU model: the H100 rate is assumed, and said (docs/definitions.md#cost)
    assert (f"Collective wait: 10.000 ms waiting for the last rank inside collectives (10.42 % of the windows) of "
            f"30.000 ms in collective kernels on 2 GPU(s): ~${usd:,.2f} per month beside the idle cost, never in it; "
            f"of which ${usd:,.2f} at assumed rates (2 GPU(s)); late rank ") in record
    assert "(chronic: last in 5 of 5 calls). Fix: find what holds the late rank back: its own idle, its data, its host." \
        in record
    run_cli("report", str(out), "--format", "md", "--out", str(tmp_path / "v.md"))
    md = (tmp_path / "v.md").read_text()
    # the busy time last, in time, said not to be in the idle cost; its dollars in words after it (issue 45 point 3)
    idle = round(fleet["idle_usd_per_month"].sum(), 2)
    assert f"**Beside the idle: busy time inside collective kernels** (a different measure, in time: " in md
    assert md.index("**Beside the idle") > md.index("Rates: ")
    assert (f"- Waiting for the last rank: 10.000 ms (10.42 % of the measured windows) busy inside collectives waiting "
            f"for the last rank to enter the call, on 2 GPU(s): not idle, not in the ${idle:,.2f}/month idle cost; "
            "remedy: find what holds the late rank back: its own idle, its data, its host. Priced like idle at the same "
            f"rates, this busy time comes to ~${usd:,.2f}/month, never added to the idle cost; of which ${usd:,.2f} at "
            "assumed rates (2 GPU(s)).") in md
    run_cli("report", str(out), "--out", str(out / "report.html"))
    page = (out / "report.html").read_text()
    # its own table, not a row of the idle categories' list
    fix_list = page[page.index('<table id="fix-list">'):]
    fix_list = fix_list[:fix_list.index("</table>")]
    assert "collective wait" not in fix_list
    section = page[page.index('<section id="fix-collective">'):]
    assert page.index('<section id="fix-collective">') > page.index('<section id="breakdown">')   # after the idle's
    assert f'<tr data-entry="collective wait" data-wait-ns="{10 * MS}" data-usd="{usd:.2f}">' in section
    assert 'data-kind="chronic"' in page
    assert f'id="collective-wait" data-wait-ns="{10 * MS}" data-transfer-ns="{20 * MS}"' in page
    pages = "\n".join(p.read_text() for p in (out / "gpu-pages").glob("*.html"))
    assert "waited for the last rank inside collectives <strong>10.000 ms</strong> (20.83 % of the window" in pages
    waits = re.findall(r'<dd id="collective-wait" data-status="measured">(.*?)</dd>', pages, re.S)
    assert len(waits) == 2 and sum(f"this busy time comes to ~${usd:,.2f}/month (at an assumed rate), never added" in w
                                   for w in waits) == 1   # rank 0's; rank 1 waited nothing
    assert all(": not idle, not in the ~$" in w for w in waits)
    for page_path in (out / "gpu-pages").glob("*.html"):   # after the idle's categories, never a card beside its cost
        one = page_path.read_text()
        cards = re.search(r'<div class="cards">(.*?)<h3>Window</h3>', one, re.S).group(1)
        assert "collective" not in cards and 'id="comm"' not in cards and "exposed" not in cards, cards
        assert one.index('<table id="categories">') < one.index('id="busy-collectives"') < one.index(
            'id="collective-wait"') < one.index('<dd id="comm">')
    assert "entered last in 5 of them (a chronic late rank: the others wait for it)" in pages


def test_cli_point_to_point_calls_are_the_pipeline_bubble(tmp_path):
    """Two pipeline stages exchanging activations with send/recv only (ncclDevKernel_SendRecv), rank 0 late by 1 ms
    in each of 3 calls: rank 1 waits 3 × 1 ms; every call is p2p and no NVTX range names a collective, so the job's
    wait is the pipeline bubble."""
    w = ExportWriter(str(tmp_path / "pp.sqlite"))
    for i in range(3):
        t = 10 * i * MS
        for r, enter in ((0, 5), (1, 4)):
            w.kernel(pid=10 + r, device=r, stream=7, start=t, end=t + enter * MS, name="gemm")
            w.kernel(pid=10 + r, device=r, stream=20, start=t + enter * MS, end=t + 7 * MS,
                     name="ncclDevKernel_SendRecv")
    w.close()
    out, fleet, jobs = run_folder(tmp_path, "pp", tmp_path / "pp.sqlite")
    assert fleet["collective_wait_ns"].astype("int64").tolist() == [0, 3 * MS]
    assert fleet["collective_transfer_ns"].astype("int64").tolist() == [6 * MS, 6 * MS]
    assert fleet["collective_p2p"].tolist() == [True, True]
    assert jobs.iloc[0]["collective_wait_kind"] == "pipeline bubble"
    record = "\n".join(p.read_text() for p in (out / "records").glob("*.md"))
    assert "Collective wait: 3.000 ms pipeline bubble (point-to-point send/recv)" in record
    # its fix-first entry is named so too, in its own section: rank 1 waited 3 ms of its 27 ms window
    fixes = read_fixes(out / "fix_first.csv")
    coll = fixes[fixes["section"] == "inside collectives"]
    assert list(coll["category"]) == ["pipeline bubble"] * 2
    assert list(coll["collective_wait_usd_per_month"]) == [float(fleet.iloc[1]["collective_wait_usd_per_month"])] * 2


def test_the_per_gpu_fan_out_matches_the_whole_report(tmp_path):
    """A large report is analysed cut per GPU (load -> plan -> agreed per GPU, each on its own task): every GPU's
    task matches the calls of the whole report itself, so its figures are those of the whole-report path."""
    from pipeline.work.tasks import agreed_task, analyse_report, load_task, plan_task

    cfg = config_from_dict({"analysis": {"window": "span"}})
    path = ranks_export(str(tmp_path / "fan.sqlite"), [1, 0, 1, 1, 0], 3)
    report = load_task(path, cfg)
    keys = report.gpu_keys()
    plans = [plan_task(report, k, cfg) for k in keys]
    cut = [agreed_task(report, k, cfg, {}, keys, plans).row for k in keys]
    whole = [r.row for r in analyse_report(report, keys, cfg, {})]
    names = [c for c in cut[0] if c.startswith("collective")]
    assert len(names) == 13  # price-free: collective_wait_usd_per_month is priced at the reduce
    assert not any(c.endswith("_usd_per_month") for r in cut + whole for c in r)
    assert [[r[c] for c in names] for r in cut] == [[r[c] for c in names] for r in whole]
    # by hand: rank 1 late in calls 0, 2, 3, rank 0 in 1 and 4; the on-time ranks wait 2 ms per call
    assert [r["collective_last_count"] for r in whole] == [2, 3, 0]
    assert [r["collective_wait_ns"] for r in whole] == [6 * MS, 4 * MS, 10 * MS]


def test_cli_a_job_measured_within_several_reports_says_it_is_a_lower_bound(tmp_path):
    """One job, two nodes, each report holding two GPUs: each report is matched on its own (rank 1 of each node last
    in all 5 calls, so rank 0 waits 10 ms on each node), and the record says what that leaves out."""
    for shift, node in enumerate(("n1", "n2")):  # two captures: the second node's run 1 s later (a copy is one)
        path = ranks_export(str(tmp_path / f"job_{node}.sqlite"), [1] * 5)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?, end = end + ?",
                       (shift * 1_000_000_000, shift * 1_000_000_000))
    cfg = tmp_path / "labels.yaml"
    cfg.write_text("labels:\n  - {match: '*job_n*', cluster: lab, job: two-nodes}\n")
    out, fleet, jobs = run_folder(tmp_path, "nodes", tmp_path / "job_n1.sqlite", tmp_path / "job_n2.sqlite",
                                  args=("--config", str(cfg)))
    assert fleet["collective_wait_status"].tolist() == ["measured"] * 4
    assert sorted(fleet["collective_wait_ns"].astype("int64").tolist()) == [0, 0, 10 * MS, 10 * MS]
    assert int(jobs.iloc[0]["collective_wait_ns"]) == 20 * MS
    assert " in job_n" in jobs.iloc[0]["collective_late_rank"]       # named with its report: the job has two
    record = "\n".join(p.read_text() for p in (out / "records").glob("*.md"))
    assert ("measured within each of its 2 reports apart (their clocks are not known to agree), a lower bound when "
            "a call's last rank is in another report") in record
