"""Issue 12, kind 9: exports of older (and other) Nsight Systems versions name their GPU too.

The exports are built (ExportWriter) in the shapes real public exports of those versions have,
table for table and column for column:

* Nsight Systems 2020.3 (e.g. quasiben/nvtx-examples, extra-p test data): no metadata table at
  all; TARGET_INFO_GPU keyed by ``deviceId`` (vmId, deviceId, name, busLocation, isDiscrete);
  TARGET_INFO_CUDA_GPU (one row per process and CUDA device: name, ``pciBusId`` -- often
  ``<UNKNOWN_BUS_ID>`` --, numMultiprocessors, deviceId, pid); no TARGET_INFO_CUDA_DEVICE; a
  kernel table without greenContextId / mangledName / sharedMemoryLimitConfig.
* Nsight Systems 2022.1-2024.5 (e.g. hpcgroup/pipit's perlmutter exports, extra-p's Windows
  capture): ``EXPORT_META_DATA`` (or META_DATA_EXPORT), TARGET_INFO_GPU with ``id``, ``smCount``,
  ``uuid`` and ``cuDevice``, but no TARGET_INFO_CUDA_DEVICE: nothing maps a process's device to
  a listed GPU. A Windows laptop lists its integrated graphics and the render driver with 0 SMs,
  and its export metadata may hold text that is not UTF-8.
"""
from __future__ import annotations

import sqlite3

import math

import pytest

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import AnalysisConfig, Config, CostConfig, Rate
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth import KERNEL_COLUMNS_AFTER_2020, ExportWriter

MS = 1_000_000
# the default card's H100 and A100 entries' sources, quoted in rate_source after "rate card: "
LIST = next(r.source for r in CostConfig().rates if r.model == "H100")
A100_LIST = next(r.source for r in CostConfig().rates if r.model == "A100")
SPAN = Config(analysis=AnalysisConfig(window="span"))
A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def writer_2020(path) -> ExportWriter:
    return ExportWriter(str(path), schema_version="", meta_table=None,
                        drop_columns={"CUPTI_ACTIVITY_KIND_KERNEL": KERNEL_COLUMNS_AFTER_2020})


def two_kernels(w: ExportWriter, pid: int = 10, device: int = 0) -> None:
    """[0,10) and [30,40) ms: W 40 ms, busy 20, idle 20 (half)."""
    w.kernel(pid=pid, device=device, stream=7, start=0, end=10 * MS, name="k")
    w.kernel(pid=pid, device=device, stream=7, start=30 * MS, end=40 * MS, name="k")


def rows(path, cfg=SPAN) -> dict:
    rep = load_report(path)
    return {key: analyse_gpu(gpu_trace(rep, key), cfg, cfg.labels_for(path)).row for key in rep.gpu_keys()}


# ---------------------------------------------------------------- Nsight Systems 2020.3 layout

def test_2020_export_whose_only_gpu_is_a_quadro_gp100(tmp_path):
    w = writer_2020(tmp_path / "gp100.sqlite")
    w.gpu_2020(0, "Quadro GP100", bus="0000:65:00.0")
    w.cuda_gpu_2020(0, 10, "Quadro GP100", sms=56)          # bus id unknown, as in many real 2020 exports
    two_kernels(w)
    (key, row), = rows(w.close()).items()
    assert key == "pid10/dev0"
    assert row["gpu_model"] == "Quadro GP100"
    # not on the default card: unpriced (issue 41: it was priced at the H100 rate, $2,660.88/month on a real
    # fleet), its idle shown, its dollars not; the warning says how to price it
    assert (row["rate_model"], math.isnan(row["rate_usd_per_hour"]), row["unpriced"], row["rate_assumed"]) == (
        "", True, True, False)
    assert math.isnan(row["idle_usd_per_month"]) and row["idle_ns"] == 20 * MS
    assert row["rate_source"] == "unpriced (cost.unlisted: unpriced): 'Quadro GP100' is not on the card"
    assert row["warnings"] == ("GPU model 'Quadro GP100' is not on the rate card; left unpriced (cost.unlisted: "
                               "unpriced): add a cost.rates entry for 'Quadro GP100' to price it")
    # cost.unlisted: default (and its earlier spelling, assume) keeps the earlier pricing: the default model assumed
    for unlisted in ("default", "assume"):
        cfg = Config(analysis=AnalysisConfig(window="span"), cost=CostConfig(unlisted=unlisted))
        (row,) = rows(w.path, cfg).values()
        assert (row["rate_model"], row["rate_usd_per_hour"], row["rate_assumed"]) == ("H100", 4.0, True)
        assert row["rate_source"] == f"rate card (default model: 'Quadro GP100' is not on the card): {LIST}"
        assert row["warnings"] == "GPU model 'Quadro GP100' is not on the rate card; priced as H100"
    # with an entry for it, it is priced by it: 0.5 idle x $1.20 x 730 = 438.0
    card = CostConfig(rates=(Rate("GP100", 1.2, ("*GP100*",), "lab"),) + CostConfig().rates)
    (row,) = rows(w.path, Config(analysis=AnalysisConfig(window="span"), cost=card)).values()
    assert (row["rate_model"], row["rate_usd_per_hour"], row["rate_source"]) == ("GP100", 1.2, "rate card: lab")
    assert row["idle_usd_per_month"] == pytest.approx(438.0)



@pytest.mark.parametrize("sms, device, shown", [(56.5, 0, "TARGET_INFO_CUDA_GPU.numMultiprocessors holds 56.5 (stored as REAL)"),
                                                (56, "zero", "TARGET_INFO_CUDA_GPU.deviceId holds 'zero' (stored as TEXT)")])
def test_2020_per_process_table_ids_and_sm_counts_must_be_integers(tmp_path, sms, device, shown):
    """TARGET_INFO_CUDA_GPU's ordinal and SM count go through the integer check (issue 23): the report is
    an error naming table.column and the value. Before: 56.5 SMs were cut to 56 silently, 'zero' was
    ``unexpected ValueError``."""
    from pipeline.load.report import ProfileError

    w = writer_2020(tmp_path / "odd.sqlite")
    w.gpu_2020(0, "Quadro GP100", bus="0000:65:00.0")
    w.cuda_gpu_2020(device, 10, "Quadro GP100", sms=sms)
    two_kernels(w)
    path = w.close()
    with pytest.raises(ProfileError) as raised:
        load_report(path)
    assert str(raised.value) == (f"{path}: {shown}, not an integer: Nsight Systems writes integers there (ns or "
                                 "ids), so the export was damaged or edited; export the report again (nsys export "
                                 "--type sqlite) from its .nsys-rep")

def test_2020_export_without_the_per_process_table_uses_the_listing(tmp_path):
    # TARGET_INFO_GPU alone (2020 layout), two GPUs of one model: the model is known
    w = writer_2020(tmp_path / "two.sqlite")
    w.gpu_2020(1, "Quadro RTX 8000", bus="0000:2D:00.0")
    w.gpu_2020(0, "Quadro RTX 8000", bus="0000:15:00.0")
    two_kernels(w)
    (row,) = rows(w.close()).values()
    assert row["gpu_model"] == "Quadro RTX 8000"


def test_2020_processes_on_one_bus_id_are_one_gpu(tmp_path):
    # TARGET_INFO_CUDA_GPU gives each process's device its PCI bus id: one physical GPU (docs/definitions.md)
    w = writer_2020(tmp_path / "shared.sqlite")
    w.gpu_2020(0, "A100-PCIE-40GB", bus="0000:99:00.0")
    w.cuda_gpu_2020(0, 10, "A100-PCIE-40GB", bus="0000:99:00.0", sms=108)
    w.cuda_gpu_2020(0, 11, "A100-PCIE-40GB", bus="0000:99:00.0", sms=108)
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="a")
    w.kernel(pid=11, device=0, stream=7, start=10 * MS, end=20 * MS, name="b")
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=40 * MS, name="a")
    out = rows(w.close())
    assert list(out) == ["bus-0000:99:00.0"]
    row = out["bus-0000:99:00.0"]
    # union [0,20) u [30,40): W 40, busy 30, idle 10
    assert (row["pids"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == ("10,11", 40 * MS, 30 * MS, 10 * MS)
    # the A100 40 GB entry (on the card since issue 26) fits it before "*A100*"
    assert (row["gpu_model"], row["rate_model"], row["rate_usd_per_hour"]) == ("A100-PCIE-40GB", "A100 40GB", 1.48)


# ---------------------------------------------------------------- 2022-2024: TARGET_INFO_GPU, no TARGET_INFO_CUDA_DEVICE

def test_four_gpus_all_one_model_name_it(tmp_path):
    w = ExportWriter(str(tmp_path / "perlmutter.sqlite"), schema_version="2.9.1", meta_table="EXPORT_META_DATA")
    for gpu_id, (cu, bus) in enumerate(((3, "c1"), (2, "82"), (1, "41"), (0, "03"))):
        w.gpu(gpu_id, A100_80, uuid=f"cf6b97c0-bf53-a39e-febd-9532190b576{gpu_id}", bus=f"0000:{bus}:00.0",
              sm_count=108, cu_device=cu)
    two_kernels(w)
    (key, row), = rows(w.close()).items()
    assert key == "pid10/dev0"   # nothing maps the process's device to one of the four: key by (pid, device)
    assert (row["gpu_model"], row["rate_model"], row["rate_usd_per_hour"]) == (A100_80, "A100", 2.5)
    assert row["rate_source"] == f"rate card: {A100_LIST}"
    assert row["idle_usd_per_month"] == pytest.approx(0.5 * 2.5 * 730)


def test_mixed_models_the_device_ordinal_names_one(tmp_path):
    w = ExportWriter(str(tmp_path / "mixed.sqlite"))
    w.gpu(0, H100, uuid="aa", sm_count=132, cu_device=1)
    w.gpu(1, A100_80, uuid="bb", sm_count=108, cu_device=0)
    two_kernels(w, pid=10, device=0)
    two_kernels(w, pid=20, device=1)
    out = rows(w.close())
    assert (out["pid10/dev0"]["gpu_model"], out["pid20/dev1"]["gpu_model"]) == (A100_80, H100)
    assert (out["pid10/dev0"]["rate_model"], out["pid20/dev1"]["rate_model"]) == ("A100", "H100")


def test_mixed_models_that_nothing_maps_fall_back_and_say_why(tmp_path):
    w = ExportWriter(str(tmp_path / "unmapped.sqlite"))
    w.gpu(0, H100, uuid="aa", sm_count=132, cu_device=None)
    w.gpu(1, A100_80, uuid="bb", sm_count=108, cu_device=None)
    two_kernels(w)
    (row,) = rows(w.close()).values()
    assert row["gpu_model"] == ""
    assert (row["rate_model"], row["rate_usd_per_hour"]) == ("H100", 4.0)
    assert row["rate_source"] == (f"rate card (default model: export lists GPUs of 2 models ({A100_80}, {H100}) "
                                  f"and does not say which one ran these kernels): {LIST}")


def test_export_that_lists_no_gpu_says_so(tmp_path):
    w = ExportWriter(str(tmp_path / "bare.sqlite"))
    two_kernels(w)
    (row,) = rows(w.close()).values()
    assert (row["gpu_model"], row["rate_source"]) == ("", f"rate card (default model: export names no GPU): {LIST}")


def test_windows_laptop_export_with_non_cuda_adapters_and_non_utf8_metadata(tmp_path):
    w = ExportWriter(str(tmp_path / "laptop.sqlite"), schema_version="2.7.1", meta_table="EXPORT_META_DATA")
    w.meta["EXPORT_USER"] = "placeholder"
    w.gpu(0, "GeForce GTX 1060 with Max-Q Design", uuid="cd91cda4-52e0-faf6-6639-ae3dd5a2e798",
          bus="0000:01:00.0", sm_count=10, cu_device=0)
    w.gpu(1, "Intel(R) HD Graphics 630", uuid="00000000-0000-0000-0000-000000000000", sm_count=0, cu_device=0)
    w.gpu(2, "Microsoft Basic Render Driver", uuid="00000000-0000-0000-0000-000000000000", sm_count=0, cu_device=0)
    two_kernels(w)
    path = w.close()
    con = sqlite3.connect(path)   # the user name as a Windows code page wrote it: not UTF-8
    con.execute("UPDATE EXPORT_META_DATA SET value = CAST(X'416C6578616E64657220476569E1' AS TEXT) "
                "WHERE name = 'EXPORT_USER'")
    con.commit()
    con.close()
    rep = load_report(path)
    assert rep.meta["EXPORT_USER"] == "Alexander Gei\ufffd"
    (row,) = rows(path).values()
    assert row["gpu_model"] == "GeForce GTX 1060 with Max-Q Design"
    # the adapters with 0 SMs are not CUDA GPUs: not "GPUs that ran no kernel" either
    # (off the card: unpriced since issue 41, and the warning says how to price it)
    assert (row["warnings"], row["status"]) == ("GPU model 'GeForce GTX 1060 with Max-Q Design' is not on the rate "
                                                "card; left unpriced (cost.unlisted: unpriced): add a cost.rates entry "
                                                "for 'GeForce GTX 1060 with Max-Q Design' to price it", "ok")
