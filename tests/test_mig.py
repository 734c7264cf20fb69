"""Issue 12, kind 2: MIG instances are their own GPUs, priced as their slice (docs/definitions.md#cost).

Exports are built in the real schema (ExportWriter): TARGET_INFO_GPU lists the board with its
``smCount``; TARGET_INFO_CUDA_DEVICE maps each process's CUDA device to it (``gpuId``) with the
instance's own ``uuid`` (``MIG-...``) and ``numMultiprocessors``. Every number below is worked
out by hand from the kernels written.
"""
from __future__ import annotations

import pytest

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import AnalysisConfig, Config, CostConfig, Rate
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth import ExportWriter

MS = 1_000_000
A100 = "NVIDIA A100-SXM4-80GB"
BOARD = "5e6a3c1d-0b7a-4a57-9c1e-2d33f1a0b001"          # as TARGET_INFO_GPU writes it (no GPU- prefix)
MIG_A = "MIG-1f0c9a0e-4b6d-5e1a-8c2b-9d0e7f6a5b01"
MIG_B = "MIG-2a1d8b1f-5c7e-6f2b-9d3c-0e1f8a7b6c02"
MIG_C = "MIG-3b2e9c2a-6d8f-7a3c-0e4d-1f2a9b8c7d03"
BOARD_SMS = 108
LIST = next(r.source for r in CostConfig().rates if r.model == "A100")  # the default card's A100 entry's source
SPAN = Config(analysis=AnalysisConfig(window="span"))


def board(w: ExportWriter, sm_count=BOARD_SMS) -> None:
    w.gpu(0, A100, uuid=BOARD, bus="0000:07:00.0", sm_count=sm_count)


def kernels_201_202(w: ExportWriter) -> None:
    """pid 201: [0,10) [20,30) ms; pid 202: [10,20) [30,40) ms; each on its CUDA device 0, stream 7."""
    for start in (0, 20):
        w.kernel(pid=201, device=0, stream=7, start=start * MS, end=(start + 10) * MS, name="gemm")
    for start in (10, 30):
        w.kernel(pid=202, device=0, stream=7, start=start * MS, end=(start + 10) * MS, name="gemm")


def rows(path, cfg=SPAN) -> dict:
    rep = load_report(path)
    return {key: analyse_gpu(gpu_trace(rep, key), cfg, cfg.labels_for(path)).row for key in rep.gpu_keys()}


def mig_export(tmp_path, **writer) -> str:
    w = ExportWriter(str(tmp_path / "mig.sqlite"), **writer)
    board(w)
    w.cuda_device(0, 0, 201, uuid=MIG_A, sms=14)
    w.cuda_device(0, 0, 202, uuid=MIG_B, sms=14)
    kernels_201_202(w)
    return w.close()


def assert_30ms_window_20_busy(row) -> None:
    # each instance: span of its own kernels is 30 ms, 20 ms of it busy, one 10 ms hole, no copies
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["dark_ns"], row["copy_only_ns"]) == \
        (30 * MS, 20 * MS, 10 * MS, 10 * MS, 0)
    assert (row["gap_count"], row["gap_total_ns"], row["device_gap_count"]) == (1, 10 * MS, 1)


# ---------------------------------------------------------------- two instances of one board

def test_two_mig_instances_of_one_board_are_two_rows(tmp_path):
    out = rows(mig_export(tmp_path))
    assert sorted(out) == [MIG_A, MIG_B]   # gpu_key names the MIG uuid
    for key, pid in ((MIG_A, "201"), (MIG_B, "202")):
        row = out[key]
        assert row["pids"] == pid
        assert_30ms_window_20_busy(row)
        assert row["gpu_model"] == A100
        # priced as its slice: no MIG profile entry on the default card -> A100 $2.50 x 14/108 SMs
        assert row["rate_model"] == "A100"
        assert row["rate_usd_per_hour"] == pytest.approx(2.5 * 14 / 108)
        assert row["rate_source"] == ("MIG instance: 14/108 SMs of the board's rate (no MIG profile entry for "
                                      f"14 SMs on the card); rate card: {LIST}")
        # idle 1/3 of W: 1/3 x (2.5 x 14/108) x 730 = 78.858... -> 78.86
        assert row["idle_usd_per_month"] == pytest.approx(78.86)
        assert (row["status"], row["warnings"]) == ("ok", "")


def test_mps_control_two_processes_on_one_board_stay_one_row(tmp_path):
    # no MIG: both processes see the whole board (108 SMs); one uses the board's uuid as CUDA
    # gives it ("GPU-" prefix), the other leaves it empty
    w = ExportWriter(str(tmp_path / "mps.sqlite"))
    board(w)
    w.cuda_device(0, 0, 201, uuid=f"GPU-{BOARD}", sms=BOARD_SMS)
    w.cuda_device(0, 0, 202, uuid="", sms=BOARD_SMS)
    kernels_201_202(w)
    out = rows(w.close())
    assert list(out) == [f"GPU-{BOARD}"]
    row = out[f"GPU-{BOARD}"]
    # union of both processes: [0,40) ms without a hole
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["pids"]) == (40 * MS, 40 * MS, 0, "201,202")
    assert (row["rate_usd_per_hour"], row["rate_source"], row["status"]) == (2.5, f"rate card: {LIST}", "ok")


# ---------------------------------------------------------------- variant: three sizes, a MIG profile entry

def test_three_instances_of_different_sizes_and_a_mig_profile_entry(tmp_path):
    w = ExportWriter(str(tmp_path / "mig3.sqlite"))
    board(w)
    for pid, uuid, sms in ((301, MIG_A, 14), (302, MIG_B, 28), (303, MIG_C, 42)):
        w.cuda_device(0, 0, pid, uuid=uuid, sms=sms)
    # pid 301: [0,10) [15,20) -> W 20, busy 15; 302: [0,40) -> busy = W; 303: [5,10) [30,35) -> W 30, busy 10
    w.kernel(pid=301, device=0, stream=1, start=0, end=10 * MS, name="a")
    w.kernel(pid=301, device=0, stream=1, start=15 * MS, end=20 * MS, name="a")
    w.kernel(pid=302, device=0, stream=1, start=0, end=40 * MS, name="b")
    w.kernel(pid=303, device=0, stream=1, start=5 * MS, end=10 * MS, name="c")
    w.kernel(pid=303, device=0, stream=1, start=30 * MS, end=35 * MS, name="c")
    profile = Rate("A100 1g.10gb", 0.5, ("*A100*",), "2026 contract", sms=14)
    cfg = Config(analysis=AnalysisConfig(window="span"), cost=CostConfig(rates=(profile,) + CostConfig().rates))
    out = rows(w.close(), cfg)
    assert sorted(out) == [MIG_A, MIG_B, MIG_C]
    a, b, c = out[MIG_A], out[MIG_B], out[MIG_C]
    assert (a["window_ns"], a["busy_ns"], a["idle_ns"]) == (20 * MS, 15 * MS, 5 * MS)
    assert (b["window_ns"], b["busy_ns"], b["idle_ns"]) == (40 * MS, 40 * MS, 0)
    assert (c["window_ns"], c["busy_ns"], c["idle_ns"]) == (30 * MS, 10 * MS, 20 * MS)
    # the 14-SM instance has its own entry on the card; the others are the board's rate x their share
    assert (a["rate_model"], a["rate_usd_per_hour"]) == ("A100 1g.10gb", 0.5)
    assert a["rate_source"] == "rate card MIG profile (14 SMs): 2026 contract"
    assert (b["rate_model"], b["rate_usd_per_hour"]) == ("A100", pytest.approx(2.5 * 28 / 108))
    assert (c["rate_model"], c["rate_usd_per_hour"]) == ("A100", pytest.approx(2.5 * 42 / 108))
    assert c["rate_source"].startswith("MIG instance: 42/108 SMs of the board's rate")
    # 5/20 x 0.5 x 730 = 91.25; 20/30 x (2.5 x 42/108) x 730 = 473.148... -> 473.15
    assert a["idle_usd_per_month"] == pytest.approx(91.25)
    assert c["idle_usd_per_month"] == pytest.approx(473.15)


def test_mig_profile_entry_does_not_price_a_whole_gpu(tmp_path):
    w = ExportWriter(str(tmp_path / "whole.sqlite"))
    board(w)
    w.cuda_device(0, 0, 201, uuid="", sms=BOARD_SMS)
    w.kernel(pid=201, device=0, stream=1, start=0, end=10 * MS, name="a")
    profile = Rate("A100 1g.10gb", 0.5, ("*A100*",), "2026 contract", sms=14)   # first on the card
    cfg = Config(analysis=AnalysisConfig(window="span"), cost=CostConfig(rates=(profile,) + CostConfig().rates))
    (row,) = rows(w.close(), cfg).values()
    assert (row["rate_model"], row["rate_usd_per_hour"]) == ("A100", 2.5)


# ---------------------------------------------------------------- table shapes that vary

def test_mig_uuid_only_in_target_info_gpu(tmp_path):
    # the instances are listed as GPUs themselves (their uuid, their smCount, the board's bus);
    # TARGET_INFO_CUDA_DEVICE names no uuid
    w = ExportWriter(str(tmp_path / "listed.sqlite"))
    board(w)
    w.gpu(1, f"{A100} MIG 1g.10gb", uuid=MIG_A, bus="0000:07:00.0", sm_count=14, cu_device=None)
    w.gpu(2, f"{A100} MIG 1g.10gb", uuid=MIG_B, bus="0000:07:00.0", sm_count=14, cu_device=None)
    w.cuda_device(1, 0, 201, uuid="", sms=14)
    w.cuda_device(2, 0, 202, uuid="", sms=14)
    kernels_201_202(w)
    out = rows(w.close())
    assert sorted(out) == [MIG_A, MIG_B]
    for row in out.values():
        assert_30ms_window_20_busy(row)
        assert row["gpu_model"] == A100
        assert row["rate_usd_per_hour"] == pytest.approx(2.5 * 14 / 108)
        # the board is in use through its instances: no "GPU ran no kernel" warning about it
        assert (row["warnings"], row["status"]) == ("", "ok")


def test_mig_uuid_without_gpu_id_uses_the_only_board(tmp_path):
    w = ExportWriter(str(tmp_path / "nogpuid.sqlite"))
    board(w)
    w.cuda_device(None, 0, 201, uuid=MIG_A, sms=14)
    w.cuda_device(None, 0, 202, uuid=MIG_B, sms=14)
    kernels_201_202(w)
    out = rows(w.close())
    assert sorted(out) == [MIG_A, MIG_B]
    for row in out.values():
        assert_30ms_window_20_busy(row)
        assert (row["gpu_model"], row["rate_usd_per_hour"]) == (A100, pytest.approx(2.5 * 14 / 108))


def test_mig_instance_sm_count_missing_is_priced_as_the_board_and_says_so(tmp_path):
    out = rows(mig_export(tmp_path, drop_columns={"TARGET_INFO_CUDA_DEVICE": ("numMultiprocessors",)}))
    assert sorted(out) == [MIG_A, MIG_B]
    for row in out.values():
        assert_30ms_window_20_busy(row)
        assert row["rate_usd_per_hour"] == 2.5
        assert row["rate_source"] == ("MIG instance of unknown size (instance SMs unknown, board SMs 108): "
                                      f"priced at the whole board's rate; rate card: {LIST}")
        assert row["status"] == "partial"
        assert row["warnings"] == ("MIG instance of unknown size: the export gives no SM count for it, so its "
                                   "share of the board is unknown and it is priced as the whole board (an upper bound)")


def test_fewer_sms_without_a_mig_uuid_cannot_be_split_and_says_so(tmp_path):
    # no uuid column: 14 of 108 SMs says "MIG instance or MPS limit", but not which instance is whose
    out = rows(mig_export(tmp_path, drop_columns={"TARGET_INFO_CUDA_DEVICE": ("uuid",)}))
    assert list(out) == [f"GPU-{BOARD}"]
    row = out[f"GPU-{BOARD}"]
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["pids"]) == (40 * MS, 40 * MS, 0, "201,202")
    assert row["status"] == "partial"
    assert row["warnings"] == (
        "pid 201 sees 14 and pid 202 sees 14 of this GPU's 108 SMs (MIG instances or an MPS SM limit), but the "
        "export names no MIG instance (no MIG- uuid): their kernels are unioned on this row (if they ran on "
        "separate MIG instances, its idle is understated) and it is priced as the whole GPU")

