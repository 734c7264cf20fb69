"""How many ranks an Nsight Systems capture says its job ran on (docs/definitions.md#categories, ``comm``: a trace
of one rank has no collectives, for its communication kernels have no peer to wait for).

Nsight Systems keeps the launched process's environment and command line in ``META_DATA_CAPTURE``
(``PROCESS_<n>:ENVIRONMENT_VARIABLE`` rows ``NAME=value``; ``PROCESS_<n>:COMMAND`` and
``PROCESS_<n>:ARGUMENT_<i>``). A rank wrapped in ``nsys profile`` by its launcher sees the job's
size in its environment (:data:`WORLD_SIZE_VARIABLES`: ``WORLD_SIZE`` set by torchrun and
torch.distributed launchers, ``OMPI_COMM_WORLD_SIZE`` by Open MPI, ``PMI_SIZE`` by MPICH / Slurm
PMI); a capture of the launcher itself names the size in its arguments (``torchrun --nnodes=1
--nproc_per_node=2``, or ``python -m torch.distributed.run ...``; one node unless ``--nnodes`` says
otherwise; only torchrun's own options, before the training script: the script's arguments are its own). Nothing else is guessed: one
process and one GPU in a report is not one rank (multi-node jobs are profiled one rank per
report), and a torchrun without ``--nproc_per_node`` says nothing.
"""
from __future__ import annotations

import os
import re

from ..model import WORLD_SIZE_SOURCE, RankCount, rank_count
from .sqlite import text_rows
from .tables import Schema

#: The capture's metadata table (name, value rows).
CAPTURE_TABLE = "META_DATA_CAPTURE"
#: Environment variables that hold the job's number of ranks, as launchers set them.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
#: torchrun's options, ``--name=value`` or ``--name value`` (``_`` or ``-`` between words).
_TORCHRUN_OPTION = re.compile(r"--(nnodes|nproc[_-]per[_-]node)(?:=(.*))?$")
#: torchrun's options that take no value (``-`` or ``_`` between words, read as ``_``); every other
#: option without ``=`` takes the next argument as its value.
_TORCHRUN_FLAGS = frozenset({"standalone", "m", "module", "no_python", "run_path"})
#: The python modules that are torchrun (``python -m torch.distributed.run``), and the python commands.
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_PYTHON = re.compile(r"python[0-9.]*")
#: ``ARGUMENT_<i>``'s index: ASCII digits (``str.isdigit`` also takes ``²``, which ``int()`` refuses).
_ARGUMENT_INDEX = re.compile(r"[0-9]{1,9}")


#: Environment variables that name the scheduler job a capture's process ran in (Slurm sets both).
SCHEDULER_JOB_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOBID")
#: ``meta`` key of the scheduler job a capture names (``SLURM_JOB_ID=4242``).
SCHEDULER_JOB = "scheduler_job"


def _capture_rows(schema: Schema) -> list[tuple[str, str]]:
    """``(name, value)`` rows of ``META_DATA_CAPTURE`` as text (absent: none)."""
    if not {"name", "value"} <= set(schema.columns(CAPTURE_TABLE)):
        return []
    return [(str(k), "" if v is None else str(v)) for k, v in text_rows(schema.con,
                                                                        f"SELECT name, value FROM {CAPTURE_TABLE}")]


def capture_scheduler_job(schema: Schema) -> str:
    """The scheduler job the capture's process environment names, as ``SLURM_JOB_ID=<id>`` (either of
    :data:`SCHEDULER_JOB_VARIABLES`, named ``SLURM_JOB_ID``); ``""`` when none does, or the processes name
    several different ids (docs/definitions.md#job-grouping). Never an error."""
    ids = set()
    for name, value in _capture_rows(schema):
        if name.endswith(":ENVIRONMENT_VARIABLE") and "=" in value:
            var, _, text = value.partition("=")
            if var in SCHEDULER_JOB_VARIABLES and text.strip() and text.strip().isprintable():
                ids.add(text.strip()[:64])
    return f"SLURM_JOB_ID={ids.pop()}" if len(ids) == 1 else ""


def with_scheduler_job(meta: dict, schema: Schema) -> dict:
    """``meta`` with :data:`SCHEDULER_JOB` when the capture names one (:func:`capture_scheduler_job`)."""
    job = capture_scheduler_job(schema)
    return {**meta, SCHEDULER_JOB: job} if job else meta


def capture_world_size(schema: Schema) -> RankCount:
    """The job's number of ranks as the capture's launch says it (module doc), with its source; 0 when
    it does not say, or says several different numbers. Reads ``META_DATA_CAPTURE`` (absent: 0). A
    value that is no ASCII integer (``WORLD_SIZE=²``) says nothing (:func:`pipeline.model.rank_count`):
    never an error."""
    rows = _capture_rows(schema)
    found = [c for c in (_from_environment(rows), _from_torchrun(rows)) if c]
    if len({int(c) for c in found}) != 1:
        return RankCount(0)
    return RankCount(found[0], " and ".join(c.source for c in found))


def _from_environment(rows: list[tuple[str, str]]) -> RankCount:
    """The one positive size the processes' :data:`WORLD_SIZE_VARIABLES` give, else 0."""
    sizes: dict[int, str] = {}
    for name, value in rows:
        if name.endswith(":ENVIRONMENT_VARIABLE") and "=" in value:
            var, _, text = value.partition("=")
            if var in WORLD_SIZE_VARIABLES and rank_count(text):
                sizes.setdefault(rank_count(text), f"{var}={text.strip()} in the capture's process environment")
    return RankCount(*sizes.popitem()) if len(sizes) == 1 else RankCount(0)


def _launcher_arguments(command: str, args: list[str]) -> list[str] | None:
    """The arguments torchrun itself reads of a captured ``command`` and its ``args``: all of them for
    ``torchrun``, those after ``-m torch.distributed.run`` (or ``.launch``) for a python; None for
    any other command. Only torchrun's own options are kept: they end at the first positional
    argument that is no option's value (the training script, or ``-m``'s module), after which come
    the script's own arguments (``train.py --nproc_per_node=1``)."""
    name = os.path.basename(command)
    if name == "torchrun":
        rest = args
    elif _PYTHON.fullmatch(name):
        modules = [i for i in range(len(args) - 1) if args[i] == "-m"]
        if not modules or args[modules[0] + 1] not in _TORCHRUN_MODULES:
            return None
        rest = args[modules[0] + 2:]
    else:
        return None
    own, i = [], 0
    while i < len(rest) and rest[i].startswith("-"):
        arg = rest[i]
        takes_value = "=" not in arg and arg.lstrip("-").replace("-", "_") not in _TORCHRUN_FLAGS
        own += rest[i:i + 2] if takes_value else [arg]
        i += 2 if takes_value else 1
    return own


def _from_torchrun(rows: list[tuple[str, str]]) -> RankCount:
    """``nnodes × nproc_per_node`` of a launched ``torchrun`` (or ``python -m torch.distributed.run``)
    whose own arguments (:func:`_launcher_arguments`) give ``nproc_per_node`` as an integer
    (``nnodes``: 1 unless given; an elastic range ``1:4`` is no number), else 0."""
    commands = [(name.split(":")[0], value) for name, value in rows if name.endswith(":COMMAND")]
    for process, command in commands:
        numbered = [(name.rpartition("_")[2], value) for name, value in rows
                    if name.startswith(f"{process}:ARGUMENT_")]
        args = _launcher_arguments(command, [value for index, value in sorted(
            (int(i), v) for i, v in numbered if _ARGUMENT_INDEX.fullmatch(i))])
        if args is None:
            continue
        found = {"nnodes": "1"}  # torchrun's default (and --standalone's): one node
        for i, arg in enumerate(args):
            match = _TORCHRUN_OPTION.match(arg)
            if match:
                value = match.group(2) if match.group(2) is not None else (args[i + 1] if i + 1 < len(args) else "")
                found["nnodes" if match.group(1) == "nnodes" else "nproc"] = value
        nodes, nproc = rank_count(found.get("nnodes")), rank_count(found.get("nproc"))
        if nodes and nproc:
            return RankCount(nodes * nproc, f"the captured torchrun --nnodes={nodes} --nproc_per_node={nproc}")
    return RankCount(0)


def with_world_size(meta: dict, size: int) -> dict:
    """``meta`` with ``world_size`` (text, as a PyTorch trace's ``meta`` has it) and, when ``size`` is a
    :class:`~pipeline.model.RankCount`, its source (``meta[WORLD_SIZE_SOURCE]``) when ``size`` is known
    (> 0) and ``meta`` does not name one already; ``meta`` itself otherwise."""
    if size <= 0 or "world_size" in meta:
        return meta
    source = getattr(size, "source", "")
    return {**meta, "world_size": str(int(size)), **({WORLD_SIZE_SOURCE: source} if source else {})}
