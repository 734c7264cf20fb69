"""What the engine raises when it has nowhere to run."""
from __future__ import annotations


class EngineError(Exception):
    """No cluster to run on: the LocalCluster could not start its workers, the scheduler
    cannot be reached, or Slurm gave no worker. The message says which and why."""
