"""``gpu-idle compare``'s own stage: two sides' stored results paired, judged and measured (docs/definitions.md#compare).

Below ``report/``, which only formats the finished comparison (``report/compare.py``); above the store, the work
and the fleet, whose results it reads. ``runs/compare.py`` opens the sides (a run folder, a sweep state folder, or
reports it runs the driver on) and hands them here; the CLI parses, calls it and prints.

- ``comparison.py``: the finished comparison's words: its sides, what a pairing basis lets it say, the gate's exit
  status (all ``report/`` may import of this stage: tests/test_layers.py, the ``report-formats`` contract);
- ``sides.py``: one side from its fleet table and run folder: its analysed rows, per-GPU JSON and kernel names;
- ``pairing.py``: jobs and GPUs paired (rank, device ordinal, process order), each GPU's name and seat;
- ``judge.py``: whether a job pair can be compared (the verdict's checks) and its confidence tiers;
- ``deltas.py``: what changed, against each side's noise floor; the gaps that vanished or appeared;
- ``result.py``: the whole comparison as plain values, and the CI gate in dollars over it.
"""
