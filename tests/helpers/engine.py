"""The whole engine in one call, for tests that keep no result store: map, second round, reduce."""
from __future__ import annotations

from pipeline.config import Config
from pipeline.fleet.grouping import group_jobs
from pipeline.fleet.reduce import reduce_outcomes
from pipeline.runs.driver import Todo, analysed
from pipeline.work.agreement import entries_of, forced_agreements


def replace_reports(outcomes: list, again: list) -> list:
    """``outcomes`` with each report's outcome replaced by its outcome in ``again`` (same path)."""
    redone = {o.path for o in again}
    return [o for o in outcomes if o.path not in redone] + list(again)


def rerun_disagreeing(outcomes: list, cfg: Config, run) -> tuple:
    """The second round: analyse again, with their job's agreement forced, the reports
    :func:`~pipeline.work.agreement.forced_agreements` names among ``outcomes``; ``run(todos) -> list
    of ReportOutcome``. Returns ``(outcomes with the redone reports replaced, {path: agreements})``."""
    group_jobs([r.row for o in outcomes if o.failure is None for r in o.results], cfg)  # as the driver does
    forced = forced_agreements(entries_of(outcomes), cfg)
    if not forced:
        return outcomes, {}
    todos = [Todo(path, cfg.labels_for(path), None, agreements) for path, agreements in sorted(forced.items())]
    return replace_reports(outcomes, run(todos)), forced


def analyse_reports(paths: list[str], cfg: Config, backend, problems=(), gpu_dir: str | None = None,
                    slots: dict | None = None) -> tuple:
    """:func:`~pipeline.runs.driver.analysed` over ``paths`` (labels from ``cfg``, ``slots``: path ->
    result slot), the second round (:func:`rerun_disagreeing`, not stored), then
    :func:`~pipeline.fleet.reduce.reduce_outcomes` with the discovery ``problems``:
    ``(fleet DataFrame, rosters dict)``."""
    todos = [Todo(p, cfg.labels_for(p), (slots or {}).get(p)) for p in paths]
    outcomes = list(analysed(todos, cfg, backend, gpu_dir))
    outcomes, _ = rerun_disagreeing(outcomes, cfg, lambda again: list(analysed(again, cfg, backend, gpu_dir)))
    return reduce_outcomes(outcomes, cfg, problems)
