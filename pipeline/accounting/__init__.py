"""Who held the GPUs: the scheduler's accounting (Slurm ``sacct --json``, Kubernetes pod JSON) joined to the
fleet table; idle dollars per team and per user; the hours no capture saw (docs/definitions.md#coverage)."""
