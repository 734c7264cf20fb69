"""Synthetic Nsight Systems SQLite exports in the real export schema.

:class:`ExportWriter` (:mod:`.writer`) writes the tables the pipeline reads with the
column names, types and encodings of Nsight Systems 2024-2026 exports (schema 3.x):
names are ids into ``StringIds``; ``globalPid = (pid << 24)`` plus the vm bits,
``globalTid = globalPid | tid``. Like real exports, a table is only created when it
gets rows (call :meth:`ExportWriter.close` to finish the file).

Tests use it to build small exports with hand-computable answers. Two generators build
on it, each writing the truth of its planted gaps beside the export:

* :mod:`.training`: :func:`generate_training_report` and the built-in example fleet
  (:func:`make_example_fleet`), small data-parallel training runs planned as plain
  Python objects;
* :mod:`.scaled`: :func:`generate_scaled_report`, exports of millions of kernels
  (vectorised with numpy, written in bulk) for the benchmarks.

:class:`KinetoWriter` (:mod:`.kineto`) writes PyTorch profiler (Kineto) Chrome-trace JSON instead;
:func:`generate_training_traces` writes the same training plan as one such trace per rank.

:mod:`.workload` holds what both share (time units, streams, API names, kernel catalogs).
"""
from .scaled import SCALED_TARGET_INFO_GPU, generate_scaled_report
from .kineto import KinetoWriter
from .training import (EXAMPLE_FLEET, EXAMPLE_KINETO_JOB, EXAMPLE_LABELS_FILE, PROFILES, TrainingProfile,
    generate_training_report, generate_training_traces, make_example_fleet)
from .workload import COMPUTE_STREAM, COPY_STREAM, NCCL_STREAM, truth_path
from .writer import KERNEL_COLUMNS_AFTER_2020, SCHEMA, SCHEMA_2020, ExportWriter, global_pid, global_tid

__all__ = [
    "COMPUTE_STREAM", "COPY_STREAM", "EXAMPLE_FLEET", "EXAMPLE_KINETO_JOB", "EXAMPLE_LABELS_FILE", "ExportWriter",
    "KERNEL_COLUMNS_AFTER_2020", "KinetoWriter", "generate_training_traces",
    "NCCL_STREAM", "PROFILES", "SCALED_TARGET_INFO_GPU", "SCHEMA", "SCHEMA_2020", "TrainingProfile", "generate_scaled_report",
    "generate_training_report", "global_pid", "global_tid", "make_example_fleet", "truth_path",
]
