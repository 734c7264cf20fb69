"""Issue 24, kind 6: messages that say what the input is, not a generic guess.

* An export cut short (Nsight Systems writes its tables one after the other and the export metadata
  table, ``META_DATA_EXPORT``, last, after the ``ENUM_*`` tables): a copy of the real tiny export
  keeping only its first tables, in the order the export created them, is called incomplete (which
  tables are missing, re-export it), not "was the run profiled with --trace=cuda"; a complete export
  whose capture traced no CUDA (a real CPU-only ``nsys`` recording) keeps that hint.
* A capture that traced copies and memsets but ran no kernel (no kernel table, or an empty one; an
  Nsight export or a PyTorch profiler trace) says so: how many copies, on how many devices.
* A complete export whose runtime table holds kernel launch calls but no kernel record: the launches
  are counted and named, the kernel trace lost them (or kernel tracing was off), not "no kernel ran".
* ``--no-cache`` means no cache of any kind: a real ``.nsys-rep`` is exported by the real ``nsys`` into
  a temporary folder removed afterwards; the export cache stays absent, the temporary folder holds
  nothing afterwards, and no message names a cache.
"""
from __future__ import annotations

import os
import shutil
import sqlite3

import pandas as pd
import pytest
from conftest import run_cli
from test_export import nsys, recording  # noqa: F401  (fixtures: the real nsys and a real CPU-only .nsys-rep)
from test_s3 import fleet_bucket, s3, write_config  # noqa: F401  (fixtures: a real S3-compatible server)

from pipeline.load.kineto import load_kineto
from pipeline.load.report import load_report
from pipeline.model import ProfileError
from pipeline.synth import ExportWriter
from pipeline.synth.kineto import KinetoWriter

MS = 1_000_000
TINY = "tiny_2kernels.sqlite"
#: The tables of the real tiny export in the order Nsight Systems created them (sqlite_master rowid):
#: META_DATA_EXPORT is the very last, the ENUM_* tables just before it.
TINY_FIRST_TABLES = ["StringIds", "ANALYSIS_FILE", "ProcessStreams", "TARGET_INFO_SYSTEM_ENV",
                     "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS", "DIAGNOSTIC_EVENT", "PROFILER_OVERHEAD",
                     "CUPTI_ACTIVITY_KIND_OVERHEAD", "CUPTI_ACTIVITY_KIND_KERNEL"]
NO_CUDA_HINT = ("no CUPTI_ACTIVITY_KIND_KERNEL table: the export holds no CUDA kernels "
                "(was the run profiled with --trace=cuda, and did it launch any kernel?)")


def cut_short(src, dst, keep: int) -> str:
    """A copy of the export ``src`` holding only the first ``keep`` tables it created (an export
    interrupted after writing them)."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        assert names[:len(TINY_FIRST_TABLES)] == TINY_FIRST_TABLES and names[-1] == "META_DATA_EXPORT"
        for name in names[keep:]:
            con.execute(f'DROP TABLE "{name}"')
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return str(dst)


def incomplete(path: str, tables: int) -> str:
    held = "1 table has" if tables == 1 else f"{tables} tables have"
    return (f"{path}: incomplete export: its {held} no CUPTI_ACTIVITY_KIND_KERNEL, no export "
            "metadata (META_DATA_EXPORT) and none of the ENUM_* tables that nsys export writes last: the export "
            "looks cut short (interrupted, or copied while it was being written); export the report again with "
            "nsys export --type sqlite")


def load_error(path: str) -> str:
    with pytest.raises(ProfileError) as caught:
        load_report(path)
    return str(caught.value)


@pytest.mark.parametrize("keep", [6, 9, 1])
def test_an_export_cut_short_is_called_incomplete(tmp_path, profiles, keep):
    """6 tables (the issue's shape: StringIds ... ANALYSIS_DETAILS), 9 (up to the overhead tables, just
    before the kernel table) and 1 (StringIds only)."""
    path = cut_short(profiles / TINY, tmp_path / f"cut{keep}.sqlite", keep)
    assert load_error(path) == incomplete(path, keep)


def test_a_complete_export_without_cuda_keeps_the_trace_cuda_hint(tmp_path):
    """Export metadata present, nothing of CUDA traced: the --trace=cuda hint is the right one."""
    w = ExportWriter(str(tmp_path / "cpu.sqlite"))
    w.nvtx(pid=10, tid=10, start=0, end=5 * MS, text="step")
    path = w.close()
    assert load_error(path) == f"{path}: {NO_CUDA_HINT}"


def test_the_older_metadata_table_counts_as_complete(tmp_path):
    """EXPORT_META_DATA (Nsight Systems 2022-2024) is export metadata too; an export of no CUDA."""
    w = ExportWriter(str(tmp_path / "old.sqlite"), schema_version="2.9.1", meta_table="EXPORT_META_DATA")
    w.nvtx(pid=10, tid=10, start=0, end=5 * MS, text="step")
    path = w.close()
    assert load_error(path) == f"{path}: {NO_CUDA_HINT}"


def add_empty_kernel_table(path: str) -> None:
    """Give the export at ``path`` an empty CUPTI_ACTIVITY_KIND_KERNEL table, in the writer's schema."""
    from pipeline.synth.writer import SCHEMA

    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({SCHEMA['CUPTI_ACTIVITY_KIND_KERNEL']})")
    con.commit()
    con.close()


def _copies_only(path, copies_on: dict, memsets_on: dict, empty_kernel_table: bool = False) -> str:
    """An export whose capture traced ``copies_on[device]`` copies and ``memsets_on[device]`` memsets
    (1 ms each, 2 ms apart) and no kernel; ``empty_kernel_table``: with a kernel table of no rows."""
    w = ExportWriter(str(path))
    for device, count in copies_on.items():
        for i in range(count):
            w.memcpy(pid=10 + device, device=device, stream=7, start=i * 2 * MS, end=i * 2 * MS + MS)
    for device, count in memsets_on.items():
        for i in range(count):
            w.memset(pid=10 + device, device=device, stream=7, start=100 * MS + i * 2 * MS,
                     end=100 * MS + i * 2 * MS + MS)
    out = w.close()
    if empty_kernel_table:
        add_empty_kernel_table(out)
    return out


def test_copies_without_kernels_say_what_was_traced(tmp_path):
    """3 copies on device 0, 2 on device 1, 1 memset on device 1: 2 devices."""
    path = _copies_only(tmp_path / "copies.sqlite", {0: 3, 1: 2}, {1: 1})
    assert load_error(path) == (
        f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL table, but CUDA was traced: 5 memory copies "
        "(CUPTI_ACTIVITY_KIND_MEMCPY) and 1 memset (CUPTI_ACTIVITY_KIND_MEMSET) on 2 devices (0, 1), and no kernel "
        "ran while profiling: there is no kernel to measure idle time between")


def test_memsets_only_in_an_empty_kernel_table(tmp_path):
    """A kernel table with no rows, 4 memsets on device 3 and no copy."""
    path = _copies_only(tmp_path / "memsets.sqlite", {}, {3: 4}, empty_kernel_table=True)
    assert load_error(path) == (
        f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows, but CUDA was traced: 4 memsets "
        "(CUPTI_ACTIVITY_KIND_MEMSET) on 1 device (3), and no kernel ran while profiling: there is no kernel to "
        "measure idle time between")


def _kineto_copies(path, copies_on: dict, memsets_on: dict) -> str:
    w = KinetoWriter(str(path), pid=1, devices=[(d, "NVIDIA A100-SXM4-80GB", 108)
                                                for d in sorted({*copies_on, *memsets_on})])
    corr = 0
    for device, count in copies_on.items():
        for i in range(count):
            corr += 1
            w.runtime(tid=1, start=i * 2 * MS, end=i * 2 * MS + 10_000, name="cudaMemcpyAsync", correlation=corr)
            w.memcpy(device=device, stream=7, start=i * 2 * MS + 20_000, end=i * 2 * MS + MS, copy_kind=1,
                     nbytes=1 << 20, correlation=corr)
    for device, count in memsets_on.items():
        for i in range(count):
            corr += 1
            w.memset(device=device, stream=7, start=100 * MS + i * 2 * MS, end=100 * MS + i * 2 * MS + MS,
                     nbytes=1 << 20, correlation=corr)
    return w.close()


def kineto_error(path: str) -> str:
    with pytest.raises(ProfileError) as caught:
        load_kineto(path)
    return str(caught.value)


def test_a_pytorch_trace_of_copies_without_kernels_says_so(tmp_path):
    path = _kineto_copies(tmp_path / "copies.json", {0: 2, 1: 1}, {1: 3})
    assert kineto_error(path) == (
        f"{path}: no kernel events in this trace, but 3 gpu_memcpy events and 3 gpu_memset events on 2 devices "
        "(0, 1), and no kernel ran while the profiler recorded: there is no kernel to measure idle time between")


def test_a_pytorch_trace_of_one_memset(tmp_path):
    path = _kineto_copies(tmp_path / "memset.json.gz", {}, {2: 1})
    assert kineto_error(path) == (
        f"{path}: no kernel events in this trace, but 1 gpu_memset event on 1 device (2), and no kernel ran while "
        "the profiler recorded: there is no kernel to measure idle time between")


# ------------------------------------------------------------------------------ --no-cache


def _files_under(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files) \
        if os.path.isdir(root) else []


@pytest.mark.needs_nsys
def test_no_cache_exports_into_a_temporary_folder_and_names_no_cache(tmp_path, recording, profiles):
    """A real CPU-only ``.nsys-rep`` (recorded by the real nsys) and a cut-short export, run with
    ``--no-cache`` by the real CLI: the export cache (``$GPU_IDLE_EXPORT_CACHE``) and the columnar cache
    (``$GPU_IDLE_CACHE``) stay absent, the temporary folder (``$TMPDIR``) holds nothing afterwards, and
    the error rows name the report, what it is and no cache."""
    exports, columns, temp = tmp_path / "exports", tmp_path / "columns", tmp_path / "tmp"
    temp.mkdir()
    rep = tmp_path / "cpu only.nsys-rep"
    shutil.copyfile(recording, rep)
    cut = cut_short(profiles / TINY, tmp_path / "cut.sqlite", 6)
    out = tmp_path / "out"
    env = {"GPU_IDLE_EXPORT_CACHE": str(exports), "GPU_IDLE_CACHE": str(columns), "TMPDIR": str(temp),
           "GPU_IDLE_NSYS": str(nsys_path())}
    proc = run_cli("run", str(rep), cut, "--out", str(out), "--no-cache", check=False, env=env)
    assert proc.returncode == 1, proc.stderr
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("report")
    assert fleet.loc[str(rep), "error"] == (f"{rep}: (exported with nsys into a temporary file, since removed) "
                                           f"{NO_CUDA_HINT}")
    assert fleet.loc[cut, "error"] == incomplete(cut, 6)
    said = (proc.stdout + proc.stderr).replace(str(tmp_path), "TMP").replace("(result cache off)", "")
    assert "cache" not in said.lower() and "TMP/tmp" not in said
    assert not exports.exists() and not columns.exists()
    assert _files_under(temp) == [] and os.listdir(temp) == []


def nsys_path():
    from pipeline.inputs.export import REPO_NSYS

    return REPO_NSYS


@pytest.mark.slow
def test_no_cache_keeps_no_staged_copy_of_a_remote_report(tmp_path, s3, fleet_bucket, profiles):
    """A real export in a real S3-compatible server (moto), run with ``--no-cache``: analysed as the
    local file is (same numbers), and neither the staging cache (``storage.cache_dir``) nor the temporary
    folder keeps a copy."""
    staged, temp = tmp_path / "staged", tmp_path / "tmp"
    temp.mkdir()
    cfg = write_config(tmp_path / "s3.yaml", s3, staged)
    url = fleet_bucket[TINY]
    out = tmp_path / "out"
    run_cli("run", url, "--out", str(out), "--window", "span", "--no-cache", "--config", str(cfg),
            env={"TMPDIR": str(temp), "GPU_IDLE_CACHE": str(tmp_path / "columns")})
    remote = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    local_out = tmp_path / "local"
    run_cli("run", str(profiles / TINY), "--out", str(local_out), "--window", "span", "--no-cache",
            env={"TMPDIR": str(temp), "GPU_IDLE_CACHE": str(tmp_path / "columns")})
    local = pd.read_csv(local_out / "fleet.csv", keep_default_na=False)
    assert remote["status"].tolist() == ["ok"] and remote["report"].tolist() == [url]
    pd.testing.assert_frame_equal(remote.drop(columns=["report"]), local.drop(columns=["report"]))
    assert not staged.exists() and not (tmp_path / "columns").exists()
    assert os.listdir(temp) == []


# ---------------------------------------------------------- cut short with an empty kernel table

def empty_kernels(path: str, tables: int) -> str:
    """:func:`incomplete` of an export cut short whose kernel table is there but holds no row."""
    return incomplete(path, tables).replace("no CUPTI_ACTIVITY_KIND_KERNEL,",
                                            "an empty CUPTI_ACTIVITY_KIND_KERNEL (no row),")


def test_a_cut_short_export_with_copies_and_an_empty_kernel_table_is_incomplete(tmp_path):
    """No export metadata, no ENUM_* table: 3 tables, the copies' and memsets' (3 copies and a memset on
    device 0) and an empty kernel table, as an export interrupted after creating it. Incomplete, not
    "CUDA was traced ... no kernel ran": the kernels' rows may be what is missing."""
    w = ExportWriter(str(tmp_path / "cut_empty.sqlite"), meta_table=None)
    for i in range(3):
        w.memcpy(pid=10, device=0, stream=7, start=i * 2 * MS, end=i * 2 * MS + MS)
    w.memset(pid=10, device=0, stream=7, start=10 * MS, end=11 * MS)
    path = w.close()
    from pipeline.synth.writer import SCHEMA

    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({SCHEMA['CUPTI_ACTIVITY_KIND_KERNEL']})")
    con.commit()
    con.close()
    assert load_error(path) == empty_kernels(path, 3)


def test_the_real_export_cut_short_after_its_kernel_table_was_created(tmp_path, profiles):
    """The real tiny export's first 10 tables, the last its kernel table, emptied (an export interrupted
    before its rows were written): incomplete. With its 2 kernel rows left in it, it loads as before."""
    kept = cut_short(profiles / TINY, tmp_path / "kept.sqlite", 10)
    assert len(load_report(kept).kernels) == 2
    path = cut_short(profiles / TINY, tmp_path / "emptied.sqlite", 10)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    assert load_error(path) == empty_kernels(path, 10)


# ---------------------------------------------------------- launches called, no kernel record

def _launches_without_kernels(path, launches: dict, copies: int = 0, kernel_table: bool = True, fill=None) -> str:
    """A complete export (metadata present) whose CUPTI_ACTIVITY_KIND_RUNTIME holds ``launches`` (API name
    as Nsight writes it -> count) calls of 10 us each, 1 ms apart, a cudaMalloc and a cudaStreamSynchronize
    (no launches), ``copies`` 1 ms copies on device 0, and an empty kernel table (none: ``kernel_table`` False); then ``fill(w)``."""
    w = ExportWriter(str(path))
    t = 0
    for name, count in launches.items():
        for _ in range(count):
            w.runtime(pid=10, tid=11, start=t, end=t + 10_000, name=name, correlation=w.correlation())
            t += MS
    w.runtime(pid=10, tid=11, start=t, end=t + MS, name="cudaMalloc_v3020")
    w.runtime(pid=10, tid=11, start=t + 2 * MS, end=t + 3 * MS, name="cudaStreamSynchronize_v3020")
    for i in range(copies):
        w.memcpy(pid=10, device=0, stream=7, start=(20 + 2 * i) * MS, end=(21 + 2 * i) * MS)
    if fill:
        fill(w)
    out = w.close()
    if kernel_table:
        add_empty_kernel_table(out)
    return out


def lost_launches(n: str, calls: str) -> str:
    return (f"but {n} called ({calls}, in CUPTI_ACTIVITY_KIND_RUNTIME) and no kernel record exists: the kernel "
            "trace lost them (or kernel tracing was off while the run was profiled)")


def test_launch_calls_without_kernel_records_say_the_trace_lost_them(tmp_path):
    """3 cudaLaunchKernel calls, an empty kernel table (main: "has zero rows: no kernel ran while profiling",
    which the 3 launches contradict). cudaMalloc and cudaStreamSynchronize are no launches."""
    path = _launches_without_kernels(tmp_path / "lost.sqlite", {"cudaLaunchKernel_v7000": 3})
    assert load_error(path) == (f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows, "
                                + lost_launches("3 kernel launches were", "3 cudaLaunchKernel"))


def test_launches_of_several_apis_and_copies_without_kernel_records(tmp_path):
    """Variants: a driver launch, a graph launch, per-thread-stream suffixes, and 2 copies: the launches
    (2 + 1 + 1 = 4) are named, most first, then by name; the copies are no sign the kernels ran or not."""
    path = _launches_without_kernels(tmp_path / "apis.sqlite", {"cuLaunchKernel": 2, "cudaGraphLaunch_v10000": 1,
                                                                "cudaLaunchKernel_ptsz_v7000": 1}, copies=2)
    assert load_error(path) == (f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows, " + lost_launches(
        "4 kernel launches were", "2 cuLaunchKernel, 1 cudaGraphLaunch, 1 cudaLaunchKernel"))


def test_one_launch_call_and_no_kernel_table(tmp_path):
    """No kernel table at all (kernel tracing off), 1 launch (main: the --trace=cuda hint)."""
    path = _launches_without_kernels(tmp_path / "one.sqlite", {"cudaLaunchKernel_v7000": 1}, kernel_table=False)
    assert load_error(path) == (f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL table, "
                                + lost_launches("1 kernel launch was", "1 cudaLaunchKernel"))


def test_an_empty_kernel_table_and_no_launch_call_keeps_its_text(tmp_path):
    """Runtime calls, none a launch: no kernel ran, as before."""
    path = _launches_without_kernels(tmp_path / "none.sqlite", {})
    assert load_error(path) == f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows: no kernel ran while profiling"


# ---------------------------------------------------------- issue 41: WSL2 named when the export says it ran there

#: The kernel release Nsight Systems wrote for the capture host of the real tiny export (a WSL2 machine).
WSL2_RELEASE = "6.6.87.2-microsoft-standard-WSL2"
WSL2_CAUSE = ("and no kernel record exists: the capture ran under WSL2 ({}), the likely cause: Nsight Systems "
              "under WSL2 can trace the CUDA calls but not the kernels they launch; profile on native Linux (else "
              "the kernel trace lost them, or kernel tracing was off)")


@pytest.mark.parametrize("name, value, named", [
    ("SoftwareReleaseVersion", WSL2_RELEASE, f"TARGET_INFO_SYSTEM_ENV SoftwareReleaseVersion {WSL2_RELEASE}"),
    ("OsDescription", "Ubuntu 22.04.4 LTS on WSL2", "TARGET_INFO_SYSTEM_ENV OsDescription Ubuntu 22.04.4 LTS on WSL2"),
    ("SoftwareReleaseVersion", "5.15.153.1-microsoft-standard-wsl2",
     "TARGET_INFO_SYSTEM_ENV SoftwareReleaseVersion 5.15.153.1-microsoft-standard-wsl2"),
    # no evidence: a native kernel release, an "Awsl" host name: the usual text
    ("SoftwareReleaseVersion", "6.8.0-45-generic", None),
    ("Hostname", "awsl-node", None),
])
def test_launches_without_kernels_name_wsl2_when_the_export_says_it(tmp_path, name, value, named):
    """2,500 cudaLaunchKernel calls and an empty kernel table; TARGET_INFO_SYSTEM_ENV holds one property
    (besides the CPU's). The property naming WSL2 is quoted and WSL2 named the likely cause; without one
    the message is the one of any export."""
    def env(w):
        w.system_env("CpuArchitecture", "x86_64", 3)
        w.system_env(name, value, 618)
    path = _launches_without_kernels(tmp_path / "wsl.sqlite", {"cudaLaunchKernel_v7000": 2500}, fill=env)
    head = f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows, but 2,500 kernel launches were called " \
           "(2,500 cudaLaunchKernel, in CUPTI_ACTIVITY_KIND_RUNTIME) "
    if named is None:
        assert load_error(path) == (f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows, "
                                    + lost_launches("2,500 kernel launches were", "2,500 cudaLaunchKernel"))
    else:
        assert load_error(path) == head + WSL2_CAUSE.format(named)


def test_wsl2_in_the_export_metadata_and_no_kernel_table(tmp_path):
    """No kernel table at all; the export metadata (not the system table) says WSL2."""
    def meta(w):
        w.meta["HostKernel"] = WSL2_RELEASE
    path = _launches_without_kernels(tmp_path / "meta.sqlite", {"cudaLaunchKernel_v7000": 1}, kernel_table=False,
                                     fill=meta)
    assert load_error(path) == (f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL table, but 1 kernel launch was called "
                                "(1 cudaLaunchKernel, in CUPTI_ACTIVITY_KIND_RUNTIME) "
                                + WSL2_CAUSE.format(f"META_DATA_EXPORT HostKernel {WSL2_RELEASE}"))


# ---------------------------------------------------------- issue 41: archives are not inputs

@pytest.mark.parametrize("name, fmt", [("traces.tar.gz", "gztar"), ("traces.tgz", "gztar"), ("traces.zip", "zip"),
                                       ("traces.tar", "tar"), ("TRACES.TAR.GZ", "gztar")])
def test_an_archive_of_traces_is_not_an_input(tmp_path, name, fmt):
    """An archive holding a PyTorch profiler trace, named on the command line: the report's error row says
    it is not an input gpu-idle reads and names what it reads, not "not an Nsight Systems report"."""
    import shutil as _shutil

    from pipeline.config import Config
    from pipeline.work.tasks import report_task

    folder = tmp_path / "in"
    folder.mkdir()
    _kineto_copies(folder / "rank0.pt.trace.json", {0: 1}, {})
    made = _shutil.make_archive(str(tmp_path / "archive"), fmt, folder)
    path = str(tmp_path / name)
    os.rename(made, path)
    outcome = report_task(path, {}, Config())
    archive = name.lower().split(".", 1)[1]
    assert outcome.failure.message == (
        f"{path}: not an input gpu-idle reads (Nsight Systems reports and exports, PyTorch profiler traces): "
        f"a .{archive} archive is not unpacked; unpack it and name its files or folder")


def test_a_file_of_no_kind_is_not_an_input(tmp_path):
    from pipeline.config import Config
    from pipeline.work.tasks import report_task

    path = tmp_path / "notes.txt"
    path.write_text("hello")
    assert report_task(str(path), {}, Config()).failure.message == (
        f"{path}: not an input gpu-idle reads (Nsight Systems reports and exports, PyTorch profiler traces)")


def test_archives_in_a_folder_are_named_not_unpacked(tmp_path, profiles):
    """A folder holding a .tgz and a .zip beside a real export: the export is found, the archives are listed as
    skipped (not an input); a folder holding only an archive (in a sub-folder) is a problem that names it."""
    from pipeline.inputs.discover import ARCHIVE, discover, skipped_note

    both = tmp_path / "both"
    both.mkdir()
    shutil.copyfile(profiles / TINY, both / TINY)
    (both / "traces.tgz").write_bytes(b"\x1f\x8b")
    (both / "traces.zip").write_bytes(b"PK")
    skipped = []
    assert discover([str(both)], skipped=skipped) == ([str(both / TINY)], [])
    assert skipped == [(str(both / "traces.tgz"), ARCHIVE), (str(both / "traces.zip"), ARCHIVE)]
    assert skipped_note(skipped) == (
        f"skipped 2 file(s) that are not reports: {both / 'traces.tgz'} (an archive: not an input gpu-idle reads; "
        f"unpack it), {both / 'traces.zip'} (an archive: not an input gpu-idle reads; unpack it)")
    only = tmp_path / "only"
    (only / "sub").mkdir(parents=True)
    (only / "sub" / "ranks.tar.gz").write_bytes(b"\x1f\x8b")
    reports, problems = discover([str(only)])
    assert reports == []
    [(item, message)] = problems
    assert item == str(only) and message.startswith(f"{only}: directory holds no ")
    assert message.endswith(" file; it holds 1 archive(s) (ranks.tar.gz), not an input gpu-idle reads (Nsight Systems "
                            "reports and exports, PyTorch profiler traces): unpack them and name their files or folder")
