"""Per-report results kept between runs: the nightly sweep's and ``gpu-idle run``'s.

``<root>/results/<content>-<settings>-<code>[-<agreement>].parquet`` + ``.json`` + ``.sums.json``
    the fleet rows and the per-GPU rosters/timelines and iteration plans of one report
    (the plans let a later run recompute the agreement of a job spread over several
    reports without analysing them again). ``<content>``:
    the report's identity (:func:`report_identity`, 20 hex digits); ``<settings>``:
    the :func:`config_hash` and the ``kind`` label the report's path gets (the rows are price-free: the
    rate card and the other labels are joined at the reduce, :mod:`pipeline.fleet.pricing`), 12 hex digits;
    ``<code>``: :func:`code_digest`,
    8 hex digits, so results made by other code (of what results depend on:
    :data:`pipeline.code_keys.RESULT_CODE`) are never served;
    ``<agreement>``: only for a report analysed with its job's agreement forced
    (:func:`~pipeline.work.agreement.agreement_token`, 12 hex digits). Written atomically
    as each report finishes; only reports whose every GPU was
    analysed are stored (a failure is tried again next time). ``.sums.json``, written last, holds
    the SHA-256 of the other two files and the cache entries the result was computed from
    (:func:`pipeline.checksums.source`: the columnar cache entry, the staged copy, the cached
    export). A result is
    served only while its files match their checksums and each entry it came from is either gone
    or still holds the content it recorded; otherwise it is a miss: removed, the report analysed
    again, one line on stderr says so (:meth:`ResultCache.stored`).
``<root>/identity-index.json``
    the content hash of each local report with the (size, mtime, ctime, inode)
    it had when hashed (:class:`IdentityIndex`).

The sweep's root is its state folder; ``gpu-idle run``'s is the columnar cache
root (:func:`pipeline.load.cache.default_cache_dir`), see :class:`ResultCache`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from ..checksums import (FILE_SUMS_SUFFIX, EntryCheckFailed, check_source, file_digest, note, read_checked, read_sums,
                         record_digest, write_sums)
from .. import code_keys
from ..config import Config
from ..fleet.pricing import price_free
from ..fleet.reduce import INT_COLUMNS, int_column, one_of_each, rosters_of
from ..io import LEFTOVER_AGE_S, atomic_path, file_entry, remove_leftovers, same_file, write_json
from ..snapshot import sidecars, snapshot_key


#: The settings a stored result is computed with (its key, :func:`config_hash`); not dask, cache or paths, and not
#: :data:`PRICING`.
ANALYSIS_SETTINGS = ("analysis", "confidence", "meter", "collective", "diagnosis", "categories", "window")
#: The settings that only price a result and label it: joined at the reduce (:mod:`pipeline.fleet.pricing`), in an
#: output folder's digest (:func:`pricing_hash`), never in a result's key.
PRICING = ("cost", "labels")
#: The labels that change a result (a ``kind`` label chooses the window, docs/definitions.md#job-kind): the only
#: ones in its key (:func:`result_key`); the others are joined at the reduce.
ANALYSIS_LABELS = ("kind",)


def _settings_hash(cfg: Config, sections: tuple[str, ...]) -> str:
    whole = dataclasses.asdict(cfg)
    return hashlib.sha256(json.dumps({k: whole[k] for k in sections}, sort_keys=True, default=str).encode()).hexdigest()


def config_hash(cfg: Config) -> str:
    """SHA-256 of every setting that can change a stored result (:data:`ANALYSIS_SETTINGS`): not the rate card,
    ``hours_per_month`` or the labels (:data:`PRICING`: a stored result is price-free), not dask, cache or paths."""
    return _settings_hash(cfg, ANALYSIS_SETTINGS)


def pricing_hash(cfg: Config) -> str:
    """SHA-256 of the settings that price and label the results (:data:`PRICING`): part of an output folder's
    digest (:meth:`ResultCache.digest`), so a changed rate re-prices the folder and analyses nothing."""
    return _settings_hash(cfg, PRICING)


def code_digest() -> str:
    """Digest of the code a stored result depends on (:func:`pipeline.code_keys.result_code`: the
    loaders, the analysis, the engine's per-report work, the model and configuration, by their meaning,
    docstrings and comments aside): results made by other code are never served; a docstring, a
    template, the report's rendering, the generators or the CLI changing leaves every key as it was."""
    return code_keys.result_code()


def foreign_code(results: list, code: str | None = None) -> str | None:
    """Why ``results`` (:class:`~pipeline.model.GpuResult`) may not be kept by a process whose code is ``code``
    (None: this process's, :func:`pipeline.code_keys.result_code`): one of them was computed by other code (its
    ``code``: a Dask worker of another build; none at all: a build older than the record); None when every one
    was computed by it."""
    code = code_keys.result_code() if code is None else code
    for result in results:
        got = getattr(result, "code", None)
        if got != code:
            return (f"computed by other code (digest {str(got)[:12] if got else 'not recorded'}, this build's "
                    f"{code[:12]})")
    return None


def result_key(identity: str, chash: str, labels: dict, code: str) -> str:
    """Name of one report's stored result: ``<content>-<settings>-<code>`` (see module docstring).

    Args:
        identity: :func:`report_identity` of the report (hex).
        chash: :func:`config_hash` of the configuration.
        labels: ``cfg.labels_for(path)`` of the report: only :data:`ANALYSIS_LABELS` count (the others are
            joined at the reduce, :mod:`pipeline.fleet.pricing`).
        code: :func:`code_digest`.
    """
    kept = {k: labels.get(k) for k in ANALYSIS_LABELS}
    settings = hashlib.sha256(json.dumps([chash, kept], sort_keys=True, default=str).encode()).hexdigest()
    return f"{identity[:20]}-{settings[:12]}-{code[:8]}"


def report_identity(path: str, storage_options: dict | None = None) -> str:
    """Content identity of a report: SHA-256 of a local file's bytes (and of its ``-wal`` / hot
    ``-journal`` when they hold part of an export's committed state:
    :func:`~pipeline.snapshot.snapshot_key`); for a remote object, a hash of its ETag, size
    and modification time (no download needed)."""
    if "://" not in path or path.startswith("file://"):
        return snapshot_key(path.removeprefix("file://"))
    import fsspec

    fs, key = fsspec.core.url_to_fs(path, **(storage_options or {}))
    info = fs.info(key)
    token = json.dumps([info.get("ETag") or info.get("etag"), info.get("size"),
                        str(info.get("LastModified") or info.get("mtime") or "")], default=str)
    return hashlib.sha256(token.encode()).hexdigest()


class IdentityIndex:
    """Recorded content hashes of local reports (``<root>/identity-index.json``).

    An entry ``path -> [size, mtime_ns, ctime_ns, inode, sha256, check]`` is trusted while
    the file's stat still gives the same four numbers; otherwise the file is
    hashed again. ``check`` is the SHA-256 of the path and the five values
    (:func:`pipeline.checksums.record_digest`): an entry changed in place (which could name
    another report's content, and so its result) fails it and is dropped, the file hashed
    again, with one line on stderr. A file changed within the last :attr:`SETTLE_NS` ns (it may
    still be being written, and a same-size rewrite within one timestamp tick
    would not show) is hashed but not recorded. Remote objects are never
    indexed (their identity costs no download anyway), nor are exports with a ``-wal`` or hot
    ``-journal`` sidecar (hashed with it every time). When the index is saved,
    only the reports seen since it was opened are kept, or, with ``keep_unseen``
    (an index shared by runs over different inputs), also the earlier entries of
    files that still exist.
    """

    NAME = "identity-index.json"
    SETTLE_NS = 2_000_000_000

    def __init__(self, state_dir: str, keep_unseen: bool = False):
        self.path = os.path.join(state_dir, self.NAME)
        self.keep_unseen = keep_unseen
        try:
            with open(self.path, encoding="utf-8") as fh:
                loaded = json.load(fh)
            sealed = {k: v for k, v in loaded.items() if isinstance(v, list) and len(v) == 6}
        except (OSError, ValueError, AttributeError):
            sealed = {}
        self.entries = {k: v for k, v in sealed.items() if v[5] == record_digest(k, v[:5])}
        if len(self.entries) < len(sealed):
            note(f"identity index {self.path} failed its check: {len(sealed) - len(self.entries)} entr(y/ies) "
                 "changed since written; those reports are hashed again")
        self.seen: dict = {}

    def identity(self, path: str, storage_options: dict | None = None, hashing=None) -> str:
        """:func:`report_identity` of ``path`` (64 hex digits), from the index when the file is untouched.
        ``hashing``: a function of no argument called first when the index does not know it (a file to hash, a
        remote object to ask about), or None.

        Raises OSError when a local file cannot be read.
        """
        hashing = hashing or (lambda: None)
        if "://" in path and not path.startswith("file://"):
            hashing()
            return report_identity(path, storage_options)
        local = os.path.abspath(path.removeprefix("file://"))
        if sidecars(local):  # the main file's stat does not show what changed in a sidecar: hash it all
            hashing()
            return snapshot_key(local)
        st = os.stat(local)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        entry = self.entries.get(local)
        if entry is not None and entry[:4] == stamp:
            self.seen[local] = entry
            return entry[4]
        hashing()
        digest = snapshot_key(local)
        after = os.stat(local)
        if ([after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino] == stamp
                and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > self.SETTLE_NS):
            self.seen[local] = stamp + [digest, record_digest(local, stamp + [digest])]
        return digest

    def save(self) -> None:
        """Write the entries to keep (see the class docstring) atomically, when they differ from the file's.

        Raises OSError when the folder cannot be written.
        """
        keep = dict(self.seen)
        if self.keep_unseen:
            keep = {**{k: v for k, v in self.entries.items() if os.path.exists(k)}, **keep}
        if keep != self.entries:
            with atomic_path(self.path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
                json.dump(keep, fh, sort_keys=True)


def identities(index: IdentityIndex, paths: list[str], storage_options: dict | None = None, hashing=None) -> list:
    """:meth:`IdentityIndex.identity` of each path, in order, on a few threads (SHA-256 of a file
    runs without the GIL, so a first run over many reports hashes them in parallel). A path that
    cannot be identified gives its exception instead of a digest. ``hashing``: a function of no argument
    called once, on one of those threads, before the first path the index does not know is hashed (or asked
    about), so that the caller's own work runs beside the hashing; None: nothing."""
    from ..load.sqlite import read_threads  # the reader (~20 ms): a run's identities, not `gpu-idle report`

    once = _once(hashing) if hashing is not None else None

    def one(path: str):
        try:
            return index.identity(path, storage_options, once)
        except Exception as exc:  # noqa: BLE001 - returned: the caller decides per report
            return exc

    if len(paths) < 2:
        return [one(p) for p in paths]
    with ThreadPoolExecutor(max_workers=read_threads()) as pool:
        return list(pool.map(one, paths))


def _once(fn):
    """``fn`` as a function of no argument that calls it the first time only, whichever thread calls first."""
    lock, called = threading.Lock(), []

    def call():
        with lock:
            if called:
                return
            called.append(True)
        fn()
    return call


def identical_copies(paths: list[str], keys: dict) -> dict[str, str]:
    """``path -> kept path`` of every path of ``paths`` whose content (the identity part of its result key in
    ``keys``, :func:`result_key`) another path has too: byte-identical copies of one export or trace, of which only
    the kept one (:func:`~pipeline.fleet.reduce.one_of_each`) is analysed (docs/inputs.md#duplicate-captures)."""
    holders: dict[str, list] = {}
    for path in paths:
        holders.setdefault(keys[path].split("-", 1)[0], []).append(path)
    return one_of_each(holders.values())


def rows_table(rows: list[dict]) -> pa.Table:
    """Fleet rows (dicts) as an Arrow table: one column per key seen in any row (first-seen order),
    ``None`` where a row lacks it. Straight from the Python values, column by column (building a
    pandas DataFrame first cost ~2 ms per report for a handful of rows, and typed a column of ints
    beside a ``None`` as float64, off by up to 128 ns at epoch-scale ns): the fleet's integer columns
    (:data:`~pipeline.fleet.reduce.INT_COLUMNS`) are exact ``int64`` (NaN there is missing). A column
    Arrow cannot type that way (e.g. text with a float NaN in it) is read with NaN as missing.
    Raises ValueError for a fraction in an integer column, ``pyarrow.ArrowException`` for a column
    Arrow cannot type at all."""
    names = list(dict.fromkeys(k for row in rows for k in row))
    columns = {}
    ints = set(INT_COLUMNS)
    for name in names:
        values = [row.get(name) for row in rows]
        try:
            column = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            column = pa.array(values, from_pandas=True)
        if name in ints and not (pa.types.is_integer(column.type) or pa.types.is_null(column.type)):
            column = pa.array(int_column(values, name))  # a float NaN or a whole float beside the ints
        columns[name] = column
    return pa.table(columns) if names else pa.Table.from_pydict({})


class ResultStore:
    """Per-report results under ``<root>/results`` (see the module docstring)."""

    def __init__(self, state_dir: str):
        self.dir = os.path.join(state_dir, "results")
        os.makedirs(self.dir, exist_ok=True)

    def remove_leftovers(self, older_than_s: float = 0.0) -> int:
        """Delete temporary files a killed run left in the store (:func:`pipeline.io.remove_leftovers`)
        last modified more than ``older_than_s`` seconds ago. Returns the count."""
        return len(remove_leftovers(self.dir, older_than_s, recursive=False))

    #: The three files of a stored result, by role; the sidecar is written last (:meth:`put`).
    ROWS, ROSTERS, SUMS = ".parquet", ".json", FILE_SUMS_SUFFIX

    def _base(self, key: str) -> str:
        return os.path.join(self.dir, key)

    def has(self, key: str) -> bool:
        """Whether every file of the result ``key`` exists (not whether it passes its check: :meth:`check`)."""
        return all(os.path.exists(self._base(key) + suffix) for suffix in (self.ROWS, self.ROSTERS, self.SUMS))

    def find(self, prefix: str) -> str | None:
        """The most recently stored complete result whose key starts with ``prefix``, or None."""
        names = [n[: -len(".parquet")] for n in os.listdir(self.dir)
                 if n.startswith(prefix) and n.endswith(".parquet")]
        found = [(os.path.getmtime(self._base(n) + ".parquet"), n) for n in names if self.has(n)]
        return max(found)[1] if found else None

    def _sums(self, key: str) -> dict:
        return read_sums(self._base(key) + self.SUMS)

    def check(self, key: str, files: bool = True) -> None:
        """Check the stored result ``key``: each cache entry it was computed from is gone or holds the
        content recorded (:func:`pipeline.checksums.check_source`) and, with ``files``, its files match
        their recorded SHA-256 (:meth:`get` checks those as it reads them). Raises
        :class:`~pipeline.checksums.EntryCheckFailed` saying what is wrong."""
        sums = self._sums(key)
        for src in sums.get("sources", []):
            check_source(src)
        for suffix in (self.ROWS, self.ROSTERS) if files else ():
            read_checked(self.dir, key + suffix, sums)

    def discard(self, key: str) -> None:
        """Remove the stored result ``key`` (its sidecar first, so a reader never trusts the rest)."""
        for suffix in (self.SUMS, self.ROWS, self.ROSTERS):
            try:
                os.unlink(self._base(key) + suffix)
            except FileNotFoundError:
                pass

    def put(self, key: str, rows: list[dict], rosters: dict, plans: dict | None = None, sources=()) -> None:
        """Store one report's rows, rosters and iteration plans (``(report, gpu key) ->``
        :class:`~pipeline.analysis.iterations.IterationPlan`, under ``"plan"`` in each GPU's JSON
        entry), then the checksums of both files and the ``sources`` (the cache entries the result
        was computed from, :func:`pipeline.checksums.source` dicts) in the sidecar, renamed into place
        last. Raises OSError when the folder cannot be written."""
        plans = plans or {}
        base = self._base(key)
        try:
            os.unlink(base + self.SUMS)  # an earlier result under this key is no longer vouched for
        except FileNotFoundError:
            pass
        write_json(base + self.ROSTERS,
                   [{"gpu_key": gpu, **value,
                     **({"plan": plans[(r, gpu)].to_json()} if plans.get((r, gpu)) is not None else {})}
                    for (r, gpu), value in rosters.items()])
        with atomic_path(base + self.ROWS) as tmp:
            pq.write_table(rows_table(rows), tmp)
        unique = list({json.dumps(src, sort_keys=True): src for src in sources}.values())
        write_sums(base + self.SUMS, {key + suffix: file_digest(base + suffix) for suffix in (self.ROWS, self.ROSTERS)},
                   sources=unique)

    def put_results(self, key: str, results: list) -> bool:
        """Store one report's per-GPU results (:class:`~pipeline.model.GpuResult`) unless it has
        none or any GPU failed (an error row is tried again next time). Returns whether it was
        stored. Raises OSError when the folder cannot be written."""
        if not results or any(r.row.get("status") == "error" for r in results):
            return False
        if not all(price_free(r.row) for r in results):  # a priced row would keep its dollars and labels
            raise ValueError("a priced row cannot be stored: stored results are price-free (pipeline.fleet.pricing)")
        self.put(key, [r.row for r in results], rosters_of(results),
                 {(r.row["report"], r.row["gpu_key"]): r.plan for r in results},
                 [src for r in results for src in r.sources])
        return True

    def get(self, key: str, report: str) -> tuple[list[dict], dict, dict]:
        """Rows, rosters and iteration plans of a stored report, relabelled with its current path; each
        file checked against its recorded SHA-256 as it is read (the cache entries it came from are
        checked by :meth:`check`). Raises OSError, ValueError (a file that fails its check:
        :class:`~pipeline.checksums.EntryCheckFailed`), KeyError or ``pyarrow.ArrowException`` on a
        missing or damaged result."""
        return self.get_many([(key, report)])

    def get_many(self, items: list[tuple[str, str]]) -> tuple[list[dict], dict, dict]:
        """Rows, rosters and iteration plans (``(report, gpu key) -> IterationPlan``) of several
        stored reports (``(key, current path)`` pairs), relabelled with their current paths; the
        rows are converted in one go, to Python values (ints exact, None where missing). Raises as
        :meth:`get`."""
        from ..analysis.iterations import IterationPlan  # (~15 ms) a run's stored plans, not `gpu-idle report`

        tables, rosters, plans = [], {}, {}
        for key, report in items:
            sums = self._sums(key)
            table = pq.read_table(pa.BufferReader(read_checked(self.dir, key + self.ROWS, sums)))
            at = table.schema.get_field_index("report")
            tables.append(table.set_column(at, "report", pa.array([report] * len(table), pa.string())))
            for d in json.loads(read_checked(self.dir, key + self.ROSTERS, sums)):
                gpu = d.pop("gpu_key")
                plan = d.pop("plan", None)
                if plan is not None:
                    try:
                        plans[(report, gpu)] = IterationPlan.from_json(plan)
                    except (KeyError, TypeError) as exc:
                        raise ValueError(f"{key}: damaged iteration plan of {gpu}") from exc
                rosters[(report, gpu)] = d
        if not tables:
            return [], rosters, plans
        merged = pa.concat_tables(tables, promote_options="permissive")
        # Python values straight from Arrow: an int64 column with a null goes through no float64
        return merged.to_pylist(), rosters, plans


@dataclasses.dataclass(frozen=True)
class ResultSlot:
    """Where one report's results go: a :class:`ResultStore` folder root, the report's key and the code of
    the process that made the slot and its key (the client's: :func:`pipeline.code_keys.result_code`). Plain
    data, so a Dask worker on the same filesystem can store the results itself."""

    root: str
    key: str
    code: str = dataclasses.field(default_factory=code_keys.result_code)

    def put(self, results: list) -> bool:
        """:meth:`ResultStore.put_results`, never raising on a read-only or full cache: it returns
        False and says so on stderr (the worker's, on a remote cluster), since the report will
        then be analysed again by every later run. Results computed by other code than the slot's
        (:func:`foreign_code`: a worker of another build) are not stored either: False, said alike."""
        why = foreign_code(results, self.code)
        if why is not None:
            report = results[0].row.get("report") if results else self.key
            print(f"gpu-idle: WARNING: result of {report} not stored in {self.root} under {self.key}: it was {why}",
                  file=sys.stderr)
            return False
        try:
            return ResultStore(self.root).put_results(self.key, results)
        except (OSError, ValueError, pa.ArrowException) as exc:
            report = results[0].row.get("report") if results else self.key
            print(f"gpu-idle: WARNING: result of {report} not stored in {self.root}: {type(exc).__name__}: {exc} "
                  "(it will be analysed again next time)", file=sys.stderr)
            return False




class ResultCache:
    """The results of earlier runs, as one run uses them: a :class:`ResultStore` under ``root``,
    the :class:`IdentityIndex` beside it, and each report's result key (content + settings + code).

    ``gpu-idle run``'s root is the columnar cache's folder (:meth:`for_run`), shared by runs over
    different inputs; the sweep's is its state folder (:meth:`for_sweep`), which one sweep at a
    time owns. Raises OSError when ``root`` cannot be created.
    """

    def __init__(self, root: str, cfg: Config, keep_unseen: bool, leftover_age_s: float):
        self.root = str(root)
        self.store = ResultStore(self.root)
        self.removed_leftovers = self.store.remove_leftovers(leftover_age_s)
        self.index = IdentityIndex(self.root, keep_unseen=keep_unseen)
        self.cfg = cfg
        self.chash, self.code = config_hash(cfg), code_digest()
        self.keys: dict[str, str] = {}

    @classmethod
    def for_run(cls, cfg: Config) -> "ResultCache":
        """``gpu-idle run``'s cache: under ``cache.dir`` (else ``$GPU_IDLE_CACHE``, else
        ``~/.cache/gpu-idle/columns``), beside the entries of
        :mod:`pipeline.load.cache`; only temporary files older than :data:`LEFTOVER_AGE_S` are
        removed (another run may be writing) and the index keeps entries of reports other runs saw."""
        from ..load.cache import default_cache_dir

        return cls(str(cfg.cache.dir or default_cache_dir()), cfg, keep_unseen=True, leftover_age_s=LEFTOVER_AGE_S)

    @classmethod
    def for_sweep(cls, state_dir: str, cfg: Config) -> "ResultCache":
        """The sweep's cache in its state folder (held by one sweep at a time: every leftover goes)."""
        return cls(state_dir, cfg, keep_unseen=False, leftover_age_s=0.0)

    def identify(self, paths: list[str], hashing=None) -> list[tuple[str, Exception]]:
        """Compute the result key of every path not yet keyed (hashing only files the identity
        index does not know). Returns ``(path, exception)`` for those that cannot be identified
        (unreadable, unreachable): they are not analysed, their error row says why. ``hashing``: called once
        when the first file is about to be hashed (:func:`identities`), or None."""
        todo = [p for p in paths if p not in self.keys]
        failed = []
        for path, identity in zip(todo, identities(self.index, todo, self.cfg.storage.options, hashing)):
            if isinstance(identity, Exception):
                failed.append((path, identity))
            else:
                self.keys[path] = result_key(identity, self.chash, self.cfg.labels_for(path), self.code)
        return failed

    def stored(self, path: str) -> bool:
        """Whether an identified report's result is stored and passes its check
        (:meth:`ResultStore.check`); one that fails is removed, a line on stderr says why, and the
        report is analysed again."""
        if path not in self.keys:
            return False
        key = self.keys[path]
        if not os.path.exists(os.path.join(self.store.dir, key) + ResultStore.SUMS):
            return False  # not stored, or being stored right now (its checksums come last): a plain miss
        try:
            self.store.check(key)
        except (OSError, ValueError) as exc:
            self._reject(path, key, exc)
            return False
        return True

    def _reject(self, path: str, key: str, exc: Exception) -> None:
        """Say that the stored result ``key`` of ``path`` failed its check, and remove it."""
        why = str(exc) if isinstance(exc, EntryCheckFailed) else f"cannot be read ({type(exc).__name__}: {exc})"
        note(f"{path}: stored result {key} in {self.store.dir} failed its check: {why}; analysed again")
        self.store.discard(key)

    def slot(self, path: str, agreements: dict | None = None) -> "ResultSlot | None":
        """Where the report's result goes (None for a report that could not be identified); with
        ``agreements`` (``{source: Agreement}``), the result of the report analysed with its job's
        agreement forced (:mod:`pipeline.work.agreement`)."""
        if path not in self.keys:
            return None
        if agreements is None:
            return ResultSlot(self.root, self.keys[path])
        from ..work.agreement import agreement_token

        return ResultSlot(self.root, f"{self.keys[path]}-{agreement_token(agreements)}")

    def digest(self, paths: list[str], problems=()) -> str:
        """:func:`inputs_digest` of a run over the identified ``paths`` and the ``problems``: what an
        output folder's manifest records."""
        return inputs_digest(f"{self.chash}-{pricing_hash(self.cfg)}", {p: self.keys[p] for p in paths},
                             list(problems), code_keys.document_code())

    def read(self, paths: list[str], slots: dict | None = None) -> tuple[list[dict], dict, list[str], dict]:
        """Rows, rosters and iteration plans of the stored results of ``paths``, relabelled with
        their paths, and the paths whose stored result is damaged (to analyse again):
        ``(rows, rosters, damaged, plans)``. ``slots``: path -> :class:`ResultSlot` to read
        instead of the report's own result (a forced agreement's)."""
        errors = (OSError, ValueError, KeyError, pa.ArrowException)
        keys = {p: (slots or {}).get(p).key if (slots or {}).get(p) is not None else self.keys[p] for p in paths}
        try:
            for path in paths:
                self.store.check(keys[path], files=False)  # its files are checked as they are read
            rows, rosters, plans = self.store.get_many([(keys[p], p) for p in paths])
            return rows, rosters, [], plans
        except errors:  # a damaged result: read them one by one
            pass
        rows, rosters, damaged, plans = [], {}, [], {}
        for path in paths:
            try:
                self.store.check(keys[path], files=False)
                got_rows, got_rosters, got_plans = self.store.get(keys[path], path)
            except errors as exc:
                self._reject(path, keys[path], exc)
                damaged.append(path)
                continue
            rows += got_rows
            rosters.update(got_rosters)
            plans.update(got_plans)
        return rows, rosters, damaged, plans

    def save_index(self) -> None:
        """Keep the content hashes learnt; a read-only cache only means hashing again next time."""
        try:
            self.index.save()
        except OSError:
            pass


def inputs_digest(chash: str, keys: dict, problems: list, code: str) -> str:
    """Digest of everything a folder of outputs (a sweep night, a ``gpu-idle run --out``
    folder) is made of: the config hash, every ``(report, result key)``, the discovery
    problems and ``code``, the digest of what writes the folder's documents
    (:func:`pipeline.code_keys.document_code`)."""
    doc = {"config": chash, "reports": sorted(keys.items()), "problems": sorted(map(list, problems)), "code": code}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


MANIFEST = ".manifest.json"


def read_manifest(night_dir: str, name: str = MANIFEST) -> dict | None:
    """An output folder's manifest (a sweep night, a ``gpu-idle run --out`` folder, a ``gpu-pages/``
    folder), the product's proof of which files it wrote there: ``{"inputs": digest or None, "complete":
    bool, "files": {relative path: {"size": bytes, "sha256": hex} or None (claimed by name: about to be
    written)}, ...}``. A manifest of earlier code (``"files"`` a list) reads with every entry None and
    ``complete`` False. None when it is missing, unreadable or malformed (a listed path that would leave
    the folder, e.g. ``../x``, makes it malformed). It says nothing about whether the files still hold
    what it lists: :func:`manifest_holds`. ``name``: the manifest's file name (a report's record of its
    GPU pages is another: :data:`~pipeline.report.rendered.PAGES_MANIFEST`)."""
    path = os.path.join(night_dir, name)
    try:
        if os.path.islink(path):
            return None
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        files = doc["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(files, list):
        files, doc["complete"] = {rel: None for rel in files}, False
    if not isinstance(files, dict) or not all(isinstance(rel, str) and _inside(rel) for rel in files):
        return None
    if not all(e is None or (isinstance(e, dict) and isinstance(e.get("size"), int)
                             and isinstance(e.get("sha256"), str)) for e in files.values()):
        return None
    doc["files"] = files
    doc["complete"] = doc.get("complete") is True
    return doc


def _inside(rel: str) -> bool:
    """Whether a manifest's relative path names a file inside its folder."""
    return bool(rel) and not os.path.isabs(rel) and os.path.normpath(rel) == rel and not rel.startswith("..")


def manifest_holds(night_dir: str, doc: dict | None) -> bool:
    """Whether ``doc`` (:func:`read_manifest`) is complete and every file it lists is a regular file holding
    exactly the bytes it lists (size and SHA-256): only then may the folder be kept as it is."""

    return bool(doc) and doc["complete"] and all(
        e is not None and same_file(os.path.join(night_dir, rel), e) for rel, e in doc["files"].items())


def write_folder_manifest(night_dir: str, files, inputs: str | None, complete: bool = True, name: str = MANIFEST,
                          **extra) -> None:
    """Write ``night_dir``'s manifest, atomically: ``inputs`` (the :func:`inputs_digest` a later identical
    run may keep the folder by; None: never kept), ``complete`` and every file of ``files`` (relative
    paths: all must exist) with its size and SHA-256, or, as a ``dict``, the entries as they are (None:
    claimed by name); ``name``: see :func:`read_manifest`. Raises OSError when the folder cannot be
    written or a file read."""
    if not isinstance(files, dict):
        files = {rel: file_entry(os.path.join(night_dir, rel)) for rel in sorted(files)}
    write_json(os.path.join(night_dir, name), {"inputs": inputs, "complete": complete, **extra,
                                                   "files": dict(sorted(files.items()))})


def drop_manifest(night_dir: str, claim=(), name: str = MANIFEST) -> dict:
    """Before a folder's files change: its manifest is rewritten to vouch for nothing (``inputs`` None,
    ``complete`` False) while still listing the files the product wrote there (and what else it says),
    plus ``claim`` (relative
    paths about to be written, by name), so that a run killed half-way leaves a folder still known as the
    product's. Returns the files' entries as they were. ``name``: see :func:`read_manifest`. Raises
    OSError when it cannot be written."""
    doc = read_manifest(night_dir, name) or {"files": {}}
    files = dict(doc["files"])
    for rel in claim:   # about to be written: its old size and SHA-256 vouch for it no longer
        files[rel] = None
    extra = {k: v for k, v in doc.items() if k not in ("inputs", "complete", "files")}
    write_folder_manifest(night_dir, files, None, False, name, **extra)
    return doc["files"]
