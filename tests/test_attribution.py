"""Hand-computed checks of pipeline.analysis.attribution: overlap sums, name grouping, categories."""
from __future__ import annotations

import pandas as pd
import pytest

from pipeline.analysis import attribution as at
from pipeline.config import CategoryRules
from pipeline.load.report import normalise_api_name


def runtime(rows):
    """rows: (start, end, name) -> runtime frame as the loader produces it."""
    df = pd.DataFrame(rows, columns=["start", "end", "name"])
    df["pid"] = 1
    df["tid"] = 1
    df["correlation_id"] = range(len(df))
    return df.astype({"start": "int64", "end": "int64"})


def gap_frame(rows):
    """rows: (start, end, kernel_before)."""
    df = pd.DataFrame(rows, columns=["start", "end", "kernel_before"])
    df["length"] = df["end"] - df["start"]
    df["pid"] = 1
    df["stream_id"] = 1
    df["kernel_after"] = "next"
    return df.astype({"start": "int64", "end": "int64", "length": "int64"})


def copies(rows):
    return pd.DataFrame(rows, columns=["start", "end"], dtype="int64")


NO_COPIES = copies([])


# ---------------------------------------------------------------- summed_overlap

def test_summed_overlap_counts_only_intersections():
    calls_s = [0, 5, 20]
    calls_e = [10, 15, 30]
    # gap [8,22): [0,10)->2 (8..10), [5,15)->7 (8..15), [20,30)->2 (20..22) = 11
    # gap [100,200): no call reaches it -> 0
    # gap [40,50): after every call -> 0
    assert at.summed_overlap(calls_s, calls_e, [8, 100, 40], [22, 200, 50]).tolist() == [11, 0, 0]


def test_summed_overlap_concurrent_threads_both_count():
    # two threads each in a call over [0,10); gap [0,10) -> 10 + 10 = 20 (not the union 10)
    assert at.summed_overlap([0, 0], [10, 10], [0], [10]).tolist() == [20]
    # two calls [0,6) and [4,10), gap [2,8): 4 (2..6) + 4 (4..8) = 8
    assert at.summed_overlap([0, 4], [6, 10], [2], [8]).tolist() == [8]


def test_summed_overlap_call_covering_gap():
    # call [0,100) around gap [40,50): counted by the gap's 10, not the call's 100
    assert at.summed_overlap([0], [100], [40], [50]).tolist() == [10]


def test_summed_overlap_empty():
    assert at.summed_overlap([], [], [0], [10]).tolist() == [0]
    assert at.summed_overlap([0], [10], [], []).tolist() == []


# ---------------------------------------------------------------- api_overlap_table

def test_api_overlap_table_groups_by_name_and_sorts():
    rt = runtime([
        (5, 12, "cudaLaunchKernel"),        # gap1 [10,20): 12 - 10 = 2
        (15, 18, "cudaLaunchKernel"),       # gap1: 18 - 15 = 3  -> launch total 5 in gap1
        (35, 50, "cudaStreamSynchronize"),  # gap2 [30,50): 50 - 35 = 15
        (60, 70, "cudaStreamSynchronize"),  # after every gap -> 0
        (100, 110, "cudaFree"),             # overlaps nothing -> no column
    ])
    g = gap_frame([(10, 20, "k"), (30, 50, "k")])
    t = at.api_overlap_table(rt, g)
    # columns by total overlap: sync 15 > launch 5
    assert list(t.columns) == ["cudaStreamSynchronize", "cudaLaunchKernel"]
    assert t["cudaStreamSynchronize"].tolist() == [0, 15]
    assert t["cudaLaunchKernel"].tolist() == [5, 0]
    assert at.attribution_lists(t) == [[("cudaLaunchKernel", 5)], [("cudaStreamSynchronize", 15)]]


def test_attribution_lists_rank_each_gap_largest_first_ties_in_column_order():
    t = pd.DataFrame({"a": [0, 3, 0, 4], "b": [5, 0, 0, 4], "c": [5, 7, 0, 9]})
    assert at.attribution_lists(t) == [[("b", 5), ("c", 5)],             # a tie: in the columns' order
                                       [("c", 7), ("a", 3)],             # largest first, whatever the column
                                       [],                               # nothing overlaps: no entry
                                       [("c", 9), ("a", 4), ("b", 4)]]
    assert all(type(ns) is int for row in at.attribution_lists(t) for _, ns in row)


def test_api_overlap_table_empty_runtime():
    t = at.api_overlap_table(runtime([]), gap_frame([(0, 10, "k")]))
    assert t.shape == (1, 0)
    assert at.attribution_lists(t) == [[]]


# ---------------------------------------------------------------- categorise

def categorise(gaps_rows, rt_rows=(), copy_rows=(), rules=CategoryRules()):
    return at.categorise(gap_frame(gaps_rows), runtime(list(rt_rows)), copies(list(copy_rows)), rules)


def test_category_sync():
    out = categorise([(0, 100, "gemm")], [(10, 70, "cudaStreamSynchronize")])
    # sync covers 70 - 10 = 60 of 100 = 0.6 >= 0.5 -> sync
    assert out["category"].tolist() == ["sync"]
    assert out["sync_ns"].tolist() == [60]
    assert out["attribution"].tolist() == [[("cudaStreamSynchronize", 60)]]


def test_category_data_from_transfer_call():
    out = categorise([(200, 300, "gemm")], [(200, 260, "cudaMemcpyAsync")])
    # cudaMemcpyAsync covers 60 of 100 -> data; no sync call
    assert out["category"].tolist() == ["data"]
    assert out["data_ns"].tolist() == [60]
    assert out["copy_ns"].tolist() == [0]


def test_category_data_from_pinned_alloc():
    out = categorise([(600, 700, "gemm")], [(600, 660, "cudaHostAlloc")])
    # cudaHostAlloc covers 60 of 100 -> data
    assert out["category"].tolist() == ["data"]


def test_category_data_from_copy_engine_only():
    out = categorise([(400, 500, "gemm")], [], [(380, 480)])
    # copy engine [380,480) covers 480 - 400 = 80 of the gap -> data, copy overlap reported
    assert out["category"].tolist() == ["data"]
    assert out["copy_ns"].tolist() == [80]
    assert out["attribution"].tolist() == [[]]  # no API call overlaps


def test_category_comm():
    out = categorise([(800, 900, "ncclKernel_AllReduce_RING_LL_Sum_float")])
    # nothing on the API side, kernel before is NCCL -> comm
    assert out["category"].tolist() == ["comm"]


def test_category_cpu():
    out = categorise([(1000, 1100, "gemm")],
                     [(1000, 1090, "cudaLaunchKernel"), (1090, 1100, "cudaStreamSynchronize")])
    # launch calls are neither sync nor data; sync covers 10/100 = 0.1 < 0.5; gemm is not a collective -> cpu
    assert out["category"].tolist() == ["cpu"]
    assert out["attribution"].tolist() == [[("cudaLaunchKernel", 90), ("cudaStreamSynchronize", 10)]]


def test_first_match_data_beats_comm_and_sync_and_copy_overlap_reported():
    out = categorise([(1200, 1300, "ncclAllReduce")],
                     [(1200, 1300, "cudaDeviceSynchronize")],
                     [(1200, 1300)])
    # sync (100/100), data (copy 100/100) and comm (nccl before) all match; data is first (issue 13:
    # a gap whose copy bar is full is data, the sync is only its witness)
    assert out["category"].tolist() == ["data"]
    assert out["copy_ns"].tolist() == [100]


def test_first_match_comm_beats_sync():
    # the seed's Day 14 example: a sync spanning the whole gap after an AllReduce is comm
    out = categorise([(1200, 1300, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")],
                     [(1200, 1300, "cudaStreamSynchronize")])
    assert out["category"].tolist() == ["comm"]
    assert out["sync_ns"].tolist() == [100]


def test_first_match_data_beats_comm():
    out = categorise([(0, 100, "ncclKernel_AllGather")], [(0, 80, "cudaMemcpyAsync")])
    # data covers 80/100; comm would also match but data comes first
    assert out["category"].tolist() == ["data"]


def test_sync_fraction_boundary():
    # exactly half the gap -> sync (at least 0.5); 49 of 100 -> not sync (cpu)
    out = categorise([(0, 100, "gemm"), (200, 300, "gemm")],
                     [(0, 50, "cudaStreamSynchronize"), (200, 249, "cudaStreamSynchronize")])
    assert out["category"].tolist() == ["sync", "cpu"]


def test_sync_ns_is_union_attribution_is_sum():
    out = categorise([(0, 100, "gemm")],
                     [(10, 60, "cudaStreamSynchronize"), (40, 70, "cudaStreamSynchronize")])
    # union [10,70) = 60 for the category witness; attribution sums 50 + 30 = 80
    assert out["sync_ns"].tolist() == [60]
    assert out["attribution"].tolist() == [[("cudaStreamSynchronize", 80)]]


def test_categorise_every_gap_and_empty():
    out = categorise([(0, 100, "gemm"), (200, 300, "nccl"), (400, 500, "gemm")],
                     [(0, 100, "cudaEventSynchronize")])
    # gap 1: sync 100/100; gap 2: nccl before -> comm; gap 3: nothing -> cpu
    assert out["category"].tolist() == ["sync", "comm", "cpu"]
    empty = categorise([])
    assert len(empty) == 0


def test_custom_rules():
    rules = CategoryRules(sync_min_fraction=0.9)
    out = categorise([(0, 100, "gemm")], [(10, 70, "cudaStreamSynchronize")], rules=rules)
    # 0.6 < 0.9 -> not sync -> cpu
    assert out["category"].tolist() == ["cpu"]


# ---------------------------------------------------------------- name normalisation

@pytest.mark.parametrize("raw, clean", [
    ("cudaStreamSynchronize_v3020", "cudaStreamSynchronize"),
    ("cudaMemcpyAsync_ptsz_v7000", "cudaMemcpyAsync"),
    ("cudaLaunchKernel_v7000", "cudaLaunchKernel"),
    ("cudaMemcpy_ptds_v7000", "cudaMemcpy"),
    ("cudaDeviceSynchronize", "cudaDeviceSynchronize"),
    ("", ""),
])
def test_normalise_api_name(raw, clean):
    assert normalise_api_name(raw) == clean


def test_normalised_names_drive_categories():
    # names as the loader hands them over (normalised) match the rule lists
    names = [normalise_api_name("cudaStreamSynchronize_v3020"), normalise_api_name("cudaMemcpyAsync_ptsz_v7000")]
    out = categorise([(0, 100, "gemm"), (200, 300, "gemm")], [(0, 60, names[0]), (200, 260, names[1])])
    # 60/100 sync, 60/100 data
    assert out["category"].tolist() == ["sync", "data"]
    assert out["attribution"].tolist() == [[("cudaStreamSynchronize", 60)], [("cudaMemcpyAsync", 60)]]


def test_periodic_one_checkpoint_on_two_streams_is_not_recurring():
    from pipeline.analysis.attribution import periodic_mask
    MS = 1_000_000
    # One 80 ms checkpoint seen on the compute stream and, 1 ms earlier, on the NCCL stream:
    # the two candidates overlap ([500, 581) and [501, 581)) -> one event -> not periodic.
    mask = periodic_mask([0, 10 * MS, 20 * MS, 30 * MS, 500 * MS, 501 * MS], [2 * MS] * 4 + [81 * MS, 80 * MS], (),
                         CategoryRules())
    assert mask.tolist() == [False] * 6


def test_periodic_two_checkpoints_on_two_streams_recur():
    from pipeline.analysis.attribution import periodic_mask
    MS = 1_000_000
    # Three checkpoints 400 ms apart (events at 500, 900, 1300 ms), each seen on two streams, among
    # eight 2 ms gaps: median of the 14 lengths = 2 ms, so candidates need >= max(50, 5 x 2) ms: exactly
    # the six ~80 ms gaps; 3 events, spacings 400 and 400 ms -> regular.
    starts = [i * 10 * MS for i in range(8)] + [500 * MS, 501 * MS, 900 * MS, 901 * MS, 1300 * MS, 1301 * MS]
    lengths = [2 * MS] * 8 + [81 * MS, 80 * MS] * 3
    mask = periodic_mask(starts, lengths, (), CategoryRules())
    assert mask.tolist() == [False] * 8 + [True] * 6
    # Only two events without iteration boundaries: one spacing proves nothing.
    assert not periodic_mask(starts[:12], lengths[:12], (), CategoryRules()).any()
    # A candidate already explained (e.g. comm on the NCCL stream) is not eligible.
    eligible = [True] * 14
    eligible[9] = eligible[11] = eligible[13] = False  # the NCCL-stream copies of each checkpoint
    assert periodic_mask(starts, lengths, (), CategoryRules(), eligible).tolist() == \
        [False] * 8 + [True, False] * 3
