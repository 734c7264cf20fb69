"""The one map: a given unit of work over every input, on an interchangeable backend.

:func:`map_work` yields one outcome per item, as each finishes, whatever runs the work. What the
work computes is the caller's (``pipeline.work``); this module only knows its shape, the
:class:`Work` contract: an item runs whole in one task, or cut in parts (open the item once,
list its parts, a first step per part, then a second step per part once every first step of
the item is known, and the part results gathered into the item's outcome).

- :class:`InProcess`: this process, for one item with no scheduler configured (no cluster to
  start, no data to move); the work may use its threads.
- :class:`OnDask`: a ``distributed.Client`` on the embedded LocalCluster or a remote
  scheduler. With at least :data:`ITEMS_PER_THREAD` items per worker thread, one task per
  item, small items grouped into one task per batch (:func:`batches`: by the work's :meth:`Work.size`,
  ``batch_bytes`` per task and at most ``batch_reports`` items, batches shrinking towards the end so
  that the workers finish together); with fewer, larger items, the work fans out per part (the opened
  item staying on the worker that opened it) and the client gathers each item's parts. Every shape
  yields the same outcomes, one per item (a batch's items each their own: one that fails is that item's
  failure, the batch's others still count). Every wait is on that client's own event loop (``as_completed(loop=client.loop)``), never
  on the process's default client: with two clients in one process (``compare``'s two sides, each on its
  own LocalCluster), Dask's default would be whichever client was made last or still lingers, and tracking
  the futures on another client's loop (stopped with its cluster) waits forever.

Every item comes back, never an exception: a task that raises (its arguments cannot be
unpickled, say) is retried ``retries`` times and then becomes the work's failure outcome with
the work's description of the exception; a task whose worker dies every time it runs (a crash
in native code, an out-of-memory kill) is a failure saying so and after how many attempts; and
when no worker is left at all for ``no_workers_timeout_s`` seconds, the items not done become
failures saying that, so the run ends within a bounded time instead of waiting forever.

Before any work is sent, every worker is asked for its build (:meth:`OnDask.check_workers`: the caller's
``fingerprint`` function, run on each worker by ``client.run``) and compared with the client's own: a worker
whose build differs (other code, other package versions) or that cannot even run the question (an older
build, no gpu-idle at all) is refused, with a line naming it and what differs, and no task goes to it (the
tasks are restricted to the accepted workers); with no worker of the client's build, the map raises
:class:`~pipeline.engine.errors.EngineError` at once, within ``check_timeout_s``, instead of letting the
tasks fail or wait for a worker that can run them.

Dask suspects every task processing on a worker when it dies, so a task that merely sat beside
the culprit at each of its deaths is given up too (a batch given up so: each of its items). A task given
up so is run again once
everything else is done, alone on the cluster (so alone on its worker; an item whose opening was
given up runs again whole, in one task): if it finishes, it was a bystander and its result
stands; if its worker dies again, it is the culprit for sure. A re-run cancelled (no worker left, a
lost scheduler) is its own failure saying so, and the round goes on with the next; what a re-run
waits for is computed again when it was given up or cancelled meanwhile.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from typing import Callable, Iterator, Protocol

from .errors import EngineError

#: One task per item when there are at least this many items per worker thread (else per-part fan-out).
ITEMS_PER_THREAD = 2
#: A new batch takes at most 1/(this x worker threads) of the small items not yet placed (:func:`batches`): a few
#: large batches first, ever smaller ones last, so that the workers finish near together; with fewer than this many
#: small items per thread, none are grouped.
BATCH_SHARE = 4


class Work(Protocol):
    """What :func:`map_work` maps: plain functions of plain (picklable) data, each never raising for
    an expected failure (they return it as a value). ``steps``: the names of its tasks, in this
    order: whole, open, parts, first, second (task keys are ``<step>-<item>-<run>[-<part>]``)."""

    steps: tuple

    def name(self, item) -> str:
        """The item's name (a path): names its tasks and starts every failure text about it."""

    def whole(self, item, threads: int = 1, on_worker: bool = False, worker_memory: int | None = None):
        """The item's outcome, computed in one task (with ``threads`` threads of this process). On a Dask
        worker the engine says so (``on_worker``) and gives that worker's memory limit (``worker_memory``,
        bytes; None: none): the work itself knows no scheduler (:func:`on_worker`)."""

    def failed(self, item, text: str):
        """The outcome of an item whose task failed: ``text`` names the item and the cause."""

    def size(self, item) -> int | None:
        """The item's size in bytes, to group small items into one task (:func:`batches`); None: unknown, it
        runs alone. Optional: a work without it has every item run alone."""

    def describe(self, exc: BaseException, name: str, what: str = "") -> str:
        """The failure text of ``exc`` raised by a task of the item ``name`` (``what``: the part's label)."""

    def open(self, item, on_worker: bool = False, worker_memory: int | None = None):
        """The item opened for its parts (kept on the worker that opened it; ``on_worker``, ``worker_memory``:
        as for :meth:`whole`)."""

    def parts(self, opened) -> tuple:
        """``(part keys, None)``, or ``(None, failure text)`` when it has no part to compute."""

    def first(self, opened, part):
        """The first step of one part (a small value)."""

    def second(self, opened, item, part, keys: list, firsts: list):
        """The result of one part, given the ``firsts`` of every part ``keys`` (same order)."""

    def part_label(self, part) -> str:
        """The label of a part in a failure text (e.g. ``"GPU x: "``)."""

    def part_failed(self, item, part, text: str):
        """The result of one part whose task failed."""

    def gather(self, item, results: list):
        """The item's outcome from its parts' results (in the order of its keys)."""


def killed_message(path: str, exc: BaseException, what: str = "", earlier: int = 0) -> str:
    """The failure text of a task whose worker died every time it ran it (``distributed.KilledWorker``);
    ``earlier``: attempts of an earlier round (beside other tasks) before this one (alone)."""
    attempts = getattr(exc, "allowed_failures", None)
    tries = f"{attempts + 1 + earlier} attempts" if isinstance(attempts, int) else "every attempt"
    worker = getattr(getattr(exc, "last_worker", None), "address", None)
    return (f"{path}: {what}the Dask worker died while analysing it ({tries}"
            + (f", last on {worker}" if worker else "") + "): a crash in native code or an out-of-memory kill; "
            "the worker's log says which")


def on_worker(call: Callable, *args, **kwargs):
    """``call(*args, **kwargs)`` in a task on a Dask worker, told so (``on_worker=True``) and given that
    worker's memory limit (``worker_memory``, bytes; None: none): how the work's :meth:`Work.whole` and
    :meth:`Work.open` run on Dask, so that the work needs no Dask of its own."""
    from distributed import get_worker

    try:
        memory = get_worker().memory_manager.memory_limit or None
    except AttributeError:
        memory = None
    return call(*args, on_worker=True, worker_memory=memory, **kwargs)


def batches(sizes: list, budget: int, cap: int, threads: int = 1) -> list[list[int]]:
    """The items (their indexes, in order) grouped into tasks, from their ``sizes`` (bytes; None: unknown).

    An item of unknown size or larger than ``budget`` bytes is a task of its own; the others are grouped in order,
    a batch closed when the next item would bring it above ``budget`` bytes or ``cap`` items, or above its share
    of the small items not yet placed: ``ceil(left / (BATCH_SHARE x threads))`` when it starts (so the batches
    shrink towards the end, down to one item). ``budget`` 0 or ``cap`` 1: every item alone."""
    if not budget or cap <= 1:
        return [[i] for i in range(len(sizes))]
    small = [s is not None and s <= budget for s in sizes]
    left = sum(small)
    groups: list[list[int]] = []
    current: list[int] = []
    used = limit = 0
    for i, size in enumerate(sizes):
        if not small[i]:
            groups.append([i])
            continue
        if current and (len(current) >= limit or used + size > budget):
            groups.append(current)
            current, used = [], 0
        if not current:
            limit = min(cap, -(-left // (BATCH_SHARE * max(1, threads))))
        current.append(i)
        used += size
        left -= 1
    if current:
        groups.append(current)
    return groups


def run_batch(work: Work, items: list, retries: int = 0) -> list:
    """(A task on a Dask worker.) Each item's outcome (:func:`on_worker` of :meth:`Work.whole`), one after
    another, in order: an item whose run raises is run again up to ``retries`` times (as Dask retries a task of its
    own), then becomes its own failure (:meth:`Work.failed`, with :meth:`Work.describe`); the other items still
    run."""
    outcomes = []
    for item in items:
        for attempt in range(retries + 1):
            try:
                outcomes.append(on_worker(work.whole, item))
                break
            except Exception as exc:  # noqa: BLE001 - the item's own failure, never the batch's
                if attempt == retries:
                    outcomes.append(work.failed(item, work.describe(exc, work.name(item))))
    return outcomes


class InProcess:
    """Run every item in this process, one after another, each on ``threads`` threads."""

    shares_files = True

    def __init__(self, threads: int = 1):
        self.threads = max(1, threads)

    def outcomes(self, work: Work, items: list) -> Iterator:
        """One outcome per item, in order."""
        for item in items:
            yield work.whole(item, self.threads)


def _token(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def _short(value) -> str:
    """A fingerprint value as a line shows it: a long digest cut to 12 characters."""
    text = str(value)
    return text[:12] if len(text) > 16 and all(c in "0123456789abcdef" for c in text) else text


def build_difference(want, got, where: str = "") -> list[str]:
    """What differs between the client's build ``want`` and a worker's ``got`` (two fingerprints: plain
    values, dicts of them nested), one ``"<key> <worker's> (client's <client's>)"`` per difference; [] when
    they are the same."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [line for key in sorted(set(want) | set(got), key=str)
                for line in build_difference(want.get(key), got.get(key), f"{where}.{key}" if where else str(key))]
    if want == got:
        return []
    return [f"{where + ' ' if where else ''}{_short(got)} (client's {_short(want)})"]


def _in_time(call, timeout_s: float | None):
    """``call()`` on a daemon thread, its result within ``timeout_s`` seconds (None: wait as long as it takes).
    Raises TimeoutError when it is not done by then (the thread is left to finish alone, and never holds up the
    process's exit), or what it raised."""
    box: dict = {}

    def target():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="gpu-idle-build-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError
    if "error" in box:
        raise box["error"]
    return box["value"]


class _Suspect:
    """A task given up because its worker died (``distributed.KilledWorker`` ``exc``), to run again
    alone: ``again()`` submits it anew; ``settle(value, failure text)`` takes the alone run's result;
    ``name`` and ``what`` start its failure text."""

    def __init__(self, exc, again, settle, name: str, what: str = ""):
        self.exc, self.again, self.settle, self.name, self.what = exc, again, settle, name, what


class OnDask:
    """Run the tasks on a ``distributed.Client``.

    Args:
        client: the client (embedded LocalCluster or remote scheduler).
        shares_files: the workers see this machine's files (a LocalCluster): a task may then
            write its outputs itself (the caller's decision; this only says where it runs).
        no_workers_timeout_s: when the cluster has had no worker at all for this long (s),
            the items not done become failures (``None``: wait forever).
        retries: times a task that raised is run again (``dask.retries``).
        fingerprint: a function of no argument (importable by name on the workers) giving this build's
            fingerprint, a plain value or dict; run here and on every worker before any work is sent
            (:meth:`check_workers`). None: no check.
        check_timeout_s: how long the workers may take to answer it (s; None: as long as they take).
        log: where the refused workers are said (one line each).
        batch_bytes, batch_reports: small items grouped into one task of at most this many bytes and items
            (:func:`batches`; 0 or 1: every item a task of its own).
    """

    def __init__(self, client, shares_files: bool, no_workers_timeout_s: float | None = None, retries: int = 0,
                 fingerprint: Callable[[], object] | None = None, check_timeout_s: float | None = 30.0,
                 log: Callable[[str], None] | None = None, batch_bytes: int = 0, batch_reports: int = 1):
        self.client = client
        self.batch_bytes = batch_bytes
        self.batch_reports = batch_reports
        #: Tasks the last one-task-per-item map submitted (a batch is one), re-runs alone not counted.
        self.submitted = 0
        self.shares_files = shares_files
        self.no_workers_timeout_s = no_workers_timeout_s
        self.retries = retries
        self.lost_all_workers = False
        self.fingerprint = fingerprint
        self.check_timeout_s = check_timeout_s
        self.log = log or (lambda text: None)
        #: The worker addresses tasks may run on (None: any worker); ``refused``: address -> why not.
        self.accepted: set | None = None
        self.refused: dict = {}
        self._where: dict = {}
        #: True once a task was cancelled because the client lost its scheduler (killed, unreachable)
        self.lost_scheduler = False

    def check_workers(self) -> None:
        """Ask every worker for its build (``client.run(fingerprint)``, within ``check_timeout_s``) and refuse
        those whose answer is not the client's (or that cannot answer): each said in one line, and every task
        restricted to the accepted workers from then on. A cluster with no worker yet is not checked (the
        results say which code computed them: the caller stores only its own build's).

        Raises:
            EngineError: no worker runs the client's build (the message names each one and why), or the
                workers did not answer in time.
        """
        self.accepted, self.refused, self._where = None, {}, {}
        if self.fingerprint is None:
            return
        want = self.fingerprint()
        try:
            answers = _in_time(lambda: self.client.run(self.fingerprint, on_error="return"), self.check_timeout_s)
        except TimeoutError:
            raise EngineError(f"the Dask workers did not say which build they run within {self.check_timeout_s:g} s "
                              "(dask.connect_timeout_s): no work sent") from None
        except Exception as exc:  # noqa: BLE001 - the scheduler could not ask them: no worker can be trusted
            raise EngineError(f"the Dask workers could not be asked which build they run: {type(exc).__name__}: "
                              f"{exc}") from None
        refused = {}
        for address, got in sorted(answers.items()):
            if isinstance(got, BaseException):
                refused[address] = (f"cannot say which build it runs ({type(got).__name__}: "
                                    f"{' '.join(str(got).split())[:200]}): another build of gpu-idle, or none")
            elif build_difference(want, got):
                refused[address] = "runs another build: " + "; ".join(build_difference(want, got))
        self.refused = refused
        for address, why in refused.items():
            self.log(f"dask: worker {address} refused, no work sent to it: {why}")
        if not refused:
            return
        accepted = set(answers) - set(refused)
        if not accepted:
            raise EngineError("no Dask worker runs this build of gpu-idle: "
                              + "; ".join(f"worker {address} {why}" for address, why in refused.items()))
        self.accepted = accepted
        self._where = {"workers": sorted(accepted), "allow_other_workers": False}

    def outcomes(self, work: Work, items: list) -> Iterator:
        """One outcome per item, in the order they finish (after :meth:`check_workers`)."""
        self.check_workers()
        threads = sum(n for address, n in self.client.nthreads().items()
                      if self.accepted is None or address in self.accepted) or 1
        if len(items) >= ITEMS_PER_THREAD * threads:
            yield from self._whole(work, items, threads)
        else:
            yield from self._parts(work, items)

    def _name(self, work: Work, item, run: str) -> str:
        name = work.name(item)
        return f"{os.path.basename(name)}-{_token(name)}-{run}"

    def _run_token(self, work: Work, items: list) -> str:
        return _token(repr(([work.name(i) for i in items], os.getpid(), id(work), os.urandom(4))))

    def _settle(self, fut, work: Work, name: str, what: str = "") -> tuple:
        """``(value, None)`` of a done future, ``(None, failure text)``, or ``(None, KilledWorker)`` for
        a task given up because its worker died. A future whose result was lost with its worker after
        it finished is waited for while the scheduler recomputes it."""
        if fut.status not in ("error", "cancelled"):
            try:
                return fut.result(), None
            except Exception:  # noqa: BLE001 - it failed after all: described below
                pass
        if fut.status == "cancelled":
            if self.lost_all_workers:
                return None, (f"{name}: {what}not analysed: no Dask worker left for {self.no_workers_timeout_s:g} s "
                              "(every worker died or none could start)")
            if getattr(self.client, "status", "running") != "running":  # the connection to the scheduler broke
                self.lost_scheduler = True
                return None, f"{name}: {what}not analysed: the Dask scheduler was lost during the run"
            return None, f"{name}: {what}task cancelled before it finished (scheduler restarted or client lost)"
        exc = fut.exception()
        from distributed.scheduler import KilledWorker

        if isinstance(exc, KilledWorker):
            return None, exc
        return None, work.describe(exc, name, what)

    def _alone(self, suspects: list, watchdog, work: Work) -> None:
        """Run each suspect again, one at a time, once nothing else runs (see the module docstring): a
        worker that dies now had no other task of this run. Its attempts count both rounds."""
        from distributed.scheduler import KilledWorker

        for suspect in suspects:
            fut = suspect.again()
            watchdog.add(fut)
            _wait_done(fut, self.client.loop)
            value, failure = self._settle(fut, work, suspect.name, suspect.what)
            if isinstance(failure, KilledWorker):
                first = getattr(suspect.exc, "allowed_failures", None)
                failure = killed_message(suspect.name, failure, suspect.what,
                                         first + 1 if isinstance(first, int) else 0)
            fut.release()
            suspect.settle(value, failure)

    def _groups(self, work: Work, items: list, threads: int) -> list[list]:
        """The items grouped into tasks (:func:`batches`, by the work's :meth:`Work.size` when it has one)."""
        size = getattr(work, "size", None)
        if size is None or not self.batch_bytes or self.batch_reports <= 1:
            return [[item] for item in items]
        return [[items[i] for i in group]
                for group in batches([size(item) for item in items], self.batch_bytes, self.batch_reports, threads)]

    def _whole(self, work: Work, items: list, threads: int = 1) -> Iterator:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        run = self._run_token(work, items)
        step = work.steps[0]
        groups = self._groups(work, items, threads)
        alone = [group[0] for group in groups if len(group) == 1]
        by_key = {f"{step}-{self._name(work, item, run)}": [item] for item in alone}
        futures = self.client.map(functools.partial(on_worker, work.whole), alone, key=list(by_key), pure=False,
                                  retries=self.retries, **self._where)
        for group in (g for g in groups if len(g) > 1):
            key = f"{step}s-{len(group)}-{self._name(work, group[0], run)}"
            by_key[key] = group
            futures.append(self.client.submit(run_batch, work, group, self.retries, key=key, pure=False,
                                              retries=self.retries, **self._where))
        self.submitted = len(futures)
        suspects: list = []
        done: list = []
        with _Watchdog(self, futures) as watchdog:
            for fut in as_completed(futures, loop=self.client.loop):
                group = by_key[fut.key]
                outcome, failure = self._settle(fut, work, work.name(group[0]))
                if failure is None:
                    ready = outcome if len(group) > 1 else [outcome]
                elif isinstance(failure, KilledWorker):  # each of its items runs again alone
                    ready = []
                    suspects += [self._suspect_whole(work, item, failure, f"again-{fut.key}" + (
                        f"-{j}" if len(group) > 1 else ""), done) for j, item in enumerate(group)]
                else:  # each item's own failure text (the batch's task itself failed or was cancelled)
                    ready = [work.failed(item, failure if j == 0 else self._settle(fut, work, work.name(item))[1])
                             for j, item in enumerate(group)]
                fut.release()
                yield from ready
            self._alone(suspects, watchdog, work)
        yield from done

    def _suspect_whole(self, work: Work, item, exc, key: str, done: list) -> _Suspect:
        def again():
            return self.client.submit(on_worker, work.whole, item, key=key, pure=False, retries=self.retries,
                                      **self._where)

        def settle(value, failure):
            done.append(value if failure is None else work.failed(item, failure))

        return _Suspect(exc, again, settle, work.name(item))

    def _parts(self, work: Work, items: list) -> Iterator:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        run = self._run_token(work, items)
        _, open_step, parts_step, first_step, second_step = work.steps
        retries = self.retries
        opened, firsts, pending, futures = {}, {}, {}, []
        done = as_completed(loop=self.client.loop)
        for i, item in enumerate(items):
            name = self._name(work, item, run)
            opened[i] = self.client.submit(on_worker, work.open, item, key=f"{open_step}-{name}", pure=False,
                                           retries=retries, **self._where)
            fut = self.client.submit(work.parts, opened[i], key=f"{parts_step}-{name}", pure=False, retries=retries,
                                     **self._where)
            pending[fut.key] = (i, name, None)
            futures.append(fut)
            done.add(fut)
        collected: dict[int, dict] = {}
        keys_of: dict[int, list] = {}
        suspects: list = []
        finished: list = []

        def complete(i, part, result):
            collected[i][part] = result
            if all(r is not None for r in collected[i].values()):
                opened.pop(i, None)
                firsts.pop(i, None)
                return work.gather(items[i], list(collected.pop(i).values()))
            return None

        with _Watchdog(self, futures) as watchdog:
            for fut in done:
                i, name, part = pending.pop(fut.key)
                item = items[i]
                if part is None:  # the item's parts (or its failure)
                    value, failure = self._settle(fut, work, work.name(item))
                    if isinstance(failure, KilledWorker):  # opening it: run it again alone, whole
                        opened.pop(i, None)
                        suspects.append(self._suspect_whole(work, item, failure, f"again-{fut.key}", finished))
                        continue
                    keys, why = value if failure is None else (None, failure)
                    if keys is None:
                        opened.pop(i, None)
                        yield work.failed(item, why)
                        continue
                    # every second step of the item waits for all its first steps (small values)
                    firsts[i] = [self.client.submit(work.first, opened[i], key_, key=f"{first_step}-{name}-{key_}",
                                                    pure=False, retries=retries, **self._where) for key_ in keys]
                    keys_of[i] = list(keys)
                    for key_ in keys:
                        task = self.client.submit(work.second, opened[i], item, key_, list(keys), firsts[i],
                                                  key=f"{second_step}-{name}-{key_}", pure=False, retries=retries,
                                                  **self._where)
                        pending[task.key] = (i, name, key_)
                        watchdog.add(task)
                        done.add(task)
                    collected[i] = dict.fromkeys(keys)
                    continue
                label = work.part_label(part)
                result, failure = self._settle(fut, work, work.name(item), label)
                fut.release()
                if isinstance(failure, KilledWorker):
                    suspects.append(self._suspect_part(work, items, i, part, failure, f"again-{fut.key}",
                                                       opened[i], keys_of[i], firsts[i], complete, finished))
                    continue
                if failure is not None:
                    result = work.part_failed(item, part, failure)
                outcome = complete(i, part, result)
                if outcome is not None:
                    yield outcome
            self._alone(suspects, watchdog, work)
        yield from finished

    def _suspect_part(self, work: Work, items: list, i: int, part, exc, key: str, opened, keys: list, firsts: list,
                      complete, finished: list) -> _Suspect:
        def again():
            # what it waits for was given up with it (the opened item, a first step): that runs again too
            submit = functools.partial(self.client.submit, pure=False, retries=self.retries, **self._where)
            source = opened if _usable(opened) else submit(on_worker, work.open, items[i], key=f"{key}-open")
            known = firsts if source is opened and all(_usable(f) for f in firsts) else [
                submit(work.first, source, k, key=f"{key}-first-{k}") for k in keys]
            return submit(work.second, source, items[i], part, keys, known, key=key)

        def settle(value, failure):
            result = value if failure is None else work.part_failed(items[i], part, failure)
            outcome = complete(i, part, result)
            if outcome is not None:
                finished.append(outcome)

        return _Suspect(exc, again, settle, work.name(items[i]), work.part_label(part))


def _usable(fut) -> bool:
    """Whether a task may still depend on ``fut``: not given up (erred) nor cancelled (a task submitted on a
    cancelled one is itself cancelled at once, Dask's reason "lost dependencies")."""
    return fut.status not in ("error", "cancelled")


def _wait_done(fut, loop) -> None:
    """Wait until ``fut`` is done, however it ends, tracked on ``loop`` (its client's event loop, never the
    process's default client's). ``distributed.wait`` would raise when the future was cancelled
    (``FuturesCancelledError``, "cancelled for reason: unknown" when the canceller gave none) and waits through
    the default client; here a cancelled future is done like any other, and :meth:`OnDask._settle` says why."""
    from distributed import as_completed

    for _ in as_completed([fut], loop=loop):
        pass


class _Watchdog:
    """While the map runs: when the cluster has had no worker for ``backend.no_workers_timeout_s``
    seconds, cancel every future not done (the map then reports them as not analysed)."""

    POLL_S = 1.0

    def __init__(self, backend: OnDask, futures: list):
        self.backend = backend
        self.futures = list(futures)
        self.stop = threading.Event()
        self.thread = None

    def add(self, future) -> None:
        self.futures.append(future)

    def __enter__(self):
        if self.backend.no_workers_timeout_s is not None:
            self.thread = threading.Thread(target=self._watch, name="gpu-idle-no-workers", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def _workers(self) -> int | None:
        accepted = self.backend.accepted
        if accepted is not None:  # only the workers tasks may run on count
            try:
                return len(accepted & set(self.backend.client.scheduler_info().get("workers", {})))
            except Exception:  # noqa: BLE001 - the scheduler itself is unreachable: count as no worker
                return 0
        try:
            return len(self.backend.client.scheduler_info(n_workers=1).get("workers", {}))  # one is enough
        except TypeError:  # older distributed: no n_workers argument
            return len(self.backend.client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - the scheduler itself is unreachable: count as no worker
            return 0

    def _watch(self) -> None:
        since = None
        while not self.stop.wait(self.POLL_S):
            if self._workers():
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self.backend.no_workers_timeout_s:
                self.backend.lost_all_workers = True
                todo = [f for f in self.futures if not f.done()]
                if todo:
                    self.backend.client.cancel(todo, force=True)
                since = None


def map_work(work: Work, items: list, backend) -> Iterator:
    """``work`` over every item on ``backend`` (:class:`InProcess` or :class:`OnDask`): one outcome per
    item, as each finishes (see the module docstring for the failures it turns into outcomes)."""
    yield from backend.outcomes(work, items)
