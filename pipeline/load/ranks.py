"""How many ranks an Nsight Systems capture says its job ran on (SPEC "Category" ``comm``: a trace
of one rank has no collectives, for its communication kernels have no peer to wait for).

Nsight Systems keeps the launched process's environment and command line in ``META_DATA_CAPTURE``
(``PROCESS_<n>:ENVIRONMENT_VARIABLE`` rows ``NAME=value``; ``PROCESS_<n>:COMMAND`` and
``PROCESS_<n>:ARGUMENT_<i>``). A rank wrapped in ``nsys profile`` by its launcher sees the job's
size in its environment (:data:`WORLD_SIZE_VARIABLES`: ``WORLD_SIZE`` set by torchrun and
torch.distributed launchers, ``OMPI_COMM_WORLD_SIZE`` by Open MPI, ``PMI_SIZE`` by MPICH / Slurm
PMI); a capture of the launcher itself names the size in its arguments (``torchrun --nnodes=1
--nproc_per_node=2``; one node unless ``--nnodes`` says otherwise). Nothing else is guessed: one
process and one GPU in a report is not one rank (multi-node jobs are profiled one rank per
report), and a torchrun without ``--nproc_per_node`` says nothing.
"""
from __future__ import annotations

import os
import re

from .sqlite import text_rows
from .tables import Schema

#: The capture's metadata table (name, value rows).
CAPTURE_TABLE = "META_DATA_CAPTURE"
#: Environment variables that hold the job's number of ranks, as launchers set them.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
#: torchrun's options, ``--name=value`` or ``--name value`` (``_`` or ``-`` between words).
_TORCHRUN_OPTION = re.compile(r"--(nnodes|nproc[_-]per[_-]node)(?:=(.*))?$")


def capture_world_size(schema: Schema) -> int:
    """The job's number of ranks as the capture's launch says it (module doc); 0 when it does not
    say, or says several different numbers. Reads ``META_DATA_CAPTURE`` (absent: 0)."""
    if not {"name", "value"} <= set(schema.columns(CAPTURE_TABLE)):
        return 0
    rows = [(str(k), "" if v is None else str(v)) for k, v in text_rows(schema.con,
                                                                       f"SELECT name, value FROM {CAPTURE_TABLE}")]
    sizes = {n for n in (_from_environment(rows), _from_torchrun(rows)) if n}
    return sizes.pop() if len(sizes) == 1 else 0


def _from_environment(rows: list[tuple[str, str]]) -> int:
    """The one positive size the processes' :data:`WORLD_SIZE_VARIABLES` give, else 0."""
    sizes = set()
    for name, value in rows:
        if name.endswith(":ENVIRONMENT_VARIABLE") and "=" in value:
            var, _, text = value.partition("=")
            if var in WORLD_SIZE_VARIABLES and text.strip().isdigit() and int(text) > 0:
                sizes.add(int(text))
    return sizes.pop() if len(sizes) == 1 else 0


def _from_torchrun(rows: list[tuple[str, str]]) -> int:
    """``nnodes × nproc_per_node`` of a launched ``torchrun`` whose arguments give ``nproc_per_node`` as
    an integer (``nnodes``: 1 unless given; an elastic range ``1:4`` is no number), else 0."""
    commands = [(name.split(":")[0], value) for name, value in rows if name.endswith(":COMMAND")]
    for process, command in commands:
        if os.path.basename(command) != "torchrun":
            continue
        numbered = [(name.rpartition("_")[2], value) for name, value in rows
                    if name.startswith(f"{process}:ARGUMENT_")]
        args = [value for index, value in sorted((int(i), v) for i, v in numbered if i.isdigit())]
        found = {"nnodes": "1"}  # torchrun's default (and --standalone's): one node
        for i, arg in enumerate(args):
            match = _TORCHRUN_OPTION.match(arg)
            if match:
                value = match.group(2) if match.group(2) is not None else (args[i + 1] if i + 1 < len(args) else "")
                found["nnodes" if match.group(1) == "nnodes" else "nproc"] = value
        if found.get("nnodes", "").isdigit() and found.get("nproc", "").isdigit():
            return int(found["nnodes"]) * int(found["nproc"])
    return 0


def with_world_size(meta: dict, size: int) -> dict:
    """``meta`` with ``world_size`` (text, as a PyTorch trace's ``meta`` has it) when ``size`` is
    known (> 0) and ``meta`` does not name one already; ``meta`` itself otherwise."""
    return {**meta, "world_size": str(size)} if size > 0 and "world_size" not in meta else meta
