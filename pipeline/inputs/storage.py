"""Reports in object storage: open any fsspec URL and stage remote files to a local cache.

SQLite (and ``nsys export``) need a local file, so a report named by a remote
URL (``s3://bucket/prefix/run.sqlite``, ``gs://…``, ``https://…``) is first
*staged*: copied into a cache directory on the worker that analyses it. The
report keeps its URL everywhere (fleet rows, error messages); only the loader
sees the local copy.

Cache: ``<cache_dir>/<key><suffix>`` where ``key`` is the SHA-256 of the URL,
the object's size and its version tag (``ETag`` / ``VersionId`` / generation /
modification time, whatever the store gives). A rerun over unchanged objects
finds its copies and downloads nothing; an object overwritten in place gets a
new ETag and so a new entry. An object whose store gives no version tag is
downloaded every time (never trusted stale). Files are written under a
temporary name in the cache directory, checked against the listed size, and
renamed into place, so a killed or failed download never leaves a half file
that a later run would take for a finished copy; ``<copy>.sums.json`` beside it
records its SHA-256 (:mod:`pipeline.checksums`), and a copy whose bytes no longer
match (or without it) is downloaded again, with one line on stderr. The cache dir: the
``storage.cache_dir`` config value, else ``$GPU_IDLE_STAGE_CACHE``, else
``$XDG_CACHE_HOME/gpu-idle/staged`` (``~/.cache/gpu-idle/staged``); delete it
at any time. With ``--no-cache`` (``cached=False``) nothing is kept: the object is
downloaded into a temporary folder that the caller removes once the report is loaded.

Storage options (``storage.options`` in the config) go to fsspec unchanged for
every remote URL: for S3, ``endpoint_url``, ``profile``, ``anon``, ``key`` /
``secret``, ``client_kwargs``, ``config_kwargs`` … (see s3fs). Local paths
never get them.

Transient errors: ``retries`` is how often a failed request is retried.
For S3 this is handed to the storage library's own retry machinery: botocore's
``standard`` retry mode (``total_max_attempts = retries + 1``; 5xx, throttling
and connection errors, exponential backoff with jitter) and s3fs's ``retries``
(dropped connections, truncated bodies, resumed with a byte range), unless the
options already set them. Other protocols are retried here, with exponential
backoff from ``backoff_s``. Either way the number of attempts is counted and
reported (:class:`Staged`, and a log line when a retry happened).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import kinds
from ..checksums import EntryCheckFailed, check_sealed_file, file_digest, note, seal_file, sidecar_of
from ..model import ProfileError

log = logging.getLogger(__name__)

#: Environment variable naming the staging cache directory.
CACHE_ENV = "GPU_IDLE_STAGE_CACHE"
DEFAULT_RETRIES = 4
DEFAULT_BACKOFF_S = 0.5
MAX_BACKOFF_S = 20.0
#: Protocols whose library retries transient errors itself once configured (see :func:`open_fs`).
SELF_RETRYING = ("s3", "s3a")
#: Protocols whose first path component is a bucket / container.
BUCKET_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2")
#: Errors that no retry can fix.
PERMANENT_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                    ValueError, TypeError, NotImplementedError)


class StageError(ProfileError):
    """A remote report cannot be staged; the message starts with its URL and names the cause."""


@dataclass(frozen=True)
class Staged:
    """Result of :func:`stage_info`.

    ``path``: the local file; ``downloaded``: False when the cache already held it
    (or the URL was local); ``attempts``: requests it took to download (0 when not
    downloaded; more than 1 when transient errors were retried); ``retried``: the
    causes of the failed attempts, e.g. ``('GetObject: HTTP 503',)``.
    """

    url: str
    path: str
    size: int
    downloaded: bool
    attempts: int = 0
    retried: tuple = field(default_factory=tuple)


def protocol_of(url: str) -> str:
    """The URL's first protocol (``s3``), or ``file`` for local paths."""
    url = str(url)
    if "://" not in url:
        return "file"
    return url.split("://", 1)[0].split("::")[-1].lower()


def is_remote(url: str) -> bool:
    """True for URLs that need staging (anything but local paths / ``file://``)."""
    return protocol_of(url) not in ("file", "local")


def default_cache_dir() -> Path:
    """``$GPU_IDLE_STAGE_CACHE``, else ``$XDG_CACHE_HOME/gpu-idle/staged``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.path.expanduser(os.environ[CACHE_ENV]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-idle" / "staged"


def fs_options(url: str, storage_options: dict | None, retries: int = DEFAULT_RETRIES) -> dict:
    """The keyword arguments fsspec gets for ``url``: the configured options, plus (for S3)
    botocore's retry settings unless the options set them already."""
    opts = dict(storage_options or {})
    if protocol_of(url) in SELF_RETRYING:
        opts.pop("retries", None)  # s3fs's is a class attribute, set by open_fs
        config = dict(opts.get("config_kwargs") or {})
        config.setdefault("retries", {"mode": "standard", "total_max_attempts": max(int(retries), 0) + 1})
        opts["config_kwargs"] = config
    return opts


def open_fs(url: str, storage_options: dict | None = None, retries: int = DEFAULT_RETRIES, fresh: bool = False):
    """``(filesystem, path)`` for ``url``. Remote URLs get :func:`fs_options`; ``fresh``
    makes a new filesystem instance (no listing cache shared with earlier calls).

    For S3 the instance's s3fs ``retries`` (attempts per call on dropped connections and
    truncated bodies) is set too: ``storage_options["retries"]`` if given, else ``retries + 1``."""
    import fsspec  # here, not at import: a run over local exports never needs it

    if not is_remote(url):
        return fsspec.core.url_to_fs(url)
    opts = fs_options(url, storage_options, retries)
    if fresh:
        opts["skip_instance_cache"] = True
    fs, path = fsspec.core.url_to_fs(url, **opts)
    if protocol_of(url) in SELF_RETRYING and fresh:
        fs.retries = int((storage_options or {}).get("retries", max(int(retries), 0) + 1))
    return fs, path


def bucket_problem(fs, url: str, path: str) -> str | None:
    """For bucket stores (S3, GCS, Azure ...): a message when the bucket of ``url`` does not exist."""
    if protocol_of(url) not in BUCKET_PROTOCOLS:
        return None
    bucket = path.strip("/").split("/", 1)[0]
    try:
        exists = fs.exists(bucket)
    except Exception:  # noqa: BLE001 - only refines the message
        return None
    if exists:
        return None
    return f"{url}: bucket {bucket!r} does not exist (or these credentials cannot see it)"


def missing_message(fs, url: str, path: str) -> str:
    """Why ``url`` is not there: the bucket itself is missing, or the object / prefix."""
    return bucket_problem(fs, url, path) or f"{url}: no such object or prefix"


def _cause(exc: BaseException) -> str:
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"


class _AttemptCounter:
    """Counts every HTTP attempt botocore makes, per operation (``needs-retry`` fires after each one)."""

    def __init__(self):
        self.attempts: Counter = Counter()
        self.failures: list[str] = []

    def __call__(self, operation=None, response=None, caught_exception=None, **_):
        name = getattr(operation, "name", "?")
        self.attempts[name] += 1
        if caught_exception is not None:
            self.failures.append(f"{name}: {type(caught_exception).__name__}")
        elif response is not None:
            status = getattr(response[0], "status_code", 200)
            if status >= 500 or status == 429:
                self.failures.append(f"{name}: HTTP {status}")
        return None  # never decides anything: botocore's retry handler does


def _attach_counter(fs, url: str) -> _AttemptCounter | None:
    """Hook an attempt counter into the filesystem's botocore client (S3 only)."""
    if protocol_of(url) not in SELF_RETRYING or not hasattr(fs, "connect"):
        return None
    counter = _AttemptCounter()
    client = fs.connect()
    client.meta.events.register("needs-retry.s3", counter)
    return counter


def _version_tag(info: dict) -> str | None:
    for name in ("ETag", "etag", "VersionId", "generation", "md5Hash", "LastModified", "last_modified",
                 "mtime", "updated", "modified"):
        value = info.get(name)
        if value not in (None, ""):
            return f"{name}={value}"
    return None


def _suffix(url: str) -> str:
    """The suffix a staged copy of ``url`` keeps, so the exporter and the loader read it as its input kind:
    its :func:`pipeline.kinds.suffix_of` (lower case), else its last suffix (at most 16 characters)."""
    name = url.rstrip("/").rsplit("/", 1)[-1].lower()
    return kinds.suffix_of(name) or Path(name).suffix[:16]


def stage(url: str, storage_options: dict | None = None, cache_dir: str | os.PathLike | None = None,
          retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S, cached: bool = True) -> str:
    """Local path of ``url``: local paths unchanged, remote objects staged (see :func:`stage_info`)."""
    return stage_info(url, storage_options, cache_dir, retries, backoff_s, cached).path


def stage_info(url: str, storage_options: dict | None = None, cache_dir: str | os.PathLike | None = None,
               retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S, cached: bool = True) -> Staged:
    """Stage one remote object into the local cache (at most once per object version).

    Args:
        url: fsspec URL of one file (``s3://bucket/key.sqlite``); a local path is
            returned as is.
        storage_options: keyword arguments for the fsspec filesystem.
        cache_dir: staging directory (``None``: :func:`default_cache_dir`).
        retries: how often a transient failure is retried (see the module doc).
        backoff_s: first wait between attempts retried here (doubles each time).
        cached: False (``--no-cache``): ``cache_dir`` is a temporary folder of the caller's (which
            removes it when done), not a cache: no earlier copy is looked for, the copy gets no
            checksum sidecar, and no message names a cache.
    Returns:
        :class:`Staged`.
    Raises:
        StageError: message starts with ``url``: object or bucket missing, access
        denied, still failing after ``retries`` retries, or the cache not writable.
    """
    url = str(url)
    if not is_remote(url):
        size = os.path.getsize(url) if os.path.isfile(url) else 0
        return Staged(url, url, size, downloaded=False)
    try:
        fs, path = open_fs(url, storage_options, retries, fresh=True)
        counter = _attach_counter(fs, url)
    except Exception as exc:  # noqa: BLE001 - bad options, missing driver: one error row
        raise StageError(f"{url}: cannot open object storage ({_cause(exc)})") from exc
    ours = 0 if counter is not None else max(int(retries), 0)  # retries made here (not by the library)

    info, tries = None, 0
    while info is None:
        tries += 1
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise StageError(missing_message(fs, url, path)) from None
        except PERMANENT_ERRORS as exc:
            raise StageError(f"{url}: cannot read object ({_cause(exc)})") from exc
        except Exception as exc:  # noqa: BLE001 - transient until proven otherwise
            if tries > ours:
                raise StageError(f"{url}: cannot read object metadata ({_cause(exc)}; "
                                 f"gave up after {_attempts(counter, 'HeadObject', tries)} attempt(s))") from exc
            _sleep(backoff_s, tries)
    if info.get("type", "file") != "file":
        raise StageError(f"{url}: is a prefix (directory), not a report file")
    size = int(info.get("size") or 0)
    tag = _version_tag(info)
    key = hashlib.sha256(json.dumps([url, size, tag]).encode("utf-8")).hexdigest()
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    folder = f"staging cache {cache}" if cached else f"temporary folder {cache}"
    final = cache / f"{key}{_suffix(url)}"
    if cached and tag is not None and final.is_file() and final.stat().st_size == size:
        try:
            check_sealed_file(final)
            return Staged(url, str(final), size, downloaded=False)
        except EntryCheckFailed as exc:
            Path(sidecar_of(final)).unlink(missing_ok=True)
            note(f"{url}: staged copy {final} failed its check: {exc}; downloaded again")

    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StageError(f"{url}: cannot write to {folder} ({exc})") from exc
    failures: list[str] = []
    tries = 0
    # An incomplete copy is retried here even when the library retries requests itself.
    limit = max(int(retries), 0) + 1
    while True:
        tries += 1
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".part", dir=cache)
        os.close(fd)
        try:
            fs.get_file(path, tmp_name)
            got = os.path.getsize(tmp_name)
            if got != size:
                raise _Incomplete(f"incomplete download: {got} of {size} bytes")
            digest = file_digest(tmp_name) if cached else None
            os.replace(tmp_name, final)
            break
        except FileNotFoundError:
            raise StageError(f"{url}: object disappeared while staging") from None
        except PERMANENT_ERRORS as exc:
            raise StageError(f"{url}: cannot download object ({_cause(exc)})") from exc
        except Exception as exc:  # noqa: BLE001 - transient until proven otherwise
            failures.append(_cause(exc))
            if tries > (ours if not isinstance(exc, _Incomplete) else limit - 1):
                raise StageError(f"{url}: cannot download object ({_cause(exc)}; gave up after "
                                 f"{_attempts(counter, 'GetObject', tries)} attempt(s))") from exc
            _sleep(backoff_s, tries)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)

    try:
        if cached:
            seal_file(final, digest)
    except OSError as exc:
        raise StageError(f"{url}: cannot write to {folder} ({exc})") from exc
    attempts = _attempts(counter, "GetObject", tries)
    retried = tuple(counter.failures if counter is not None else failures)
    if attempts > 1 or retried:
        log.warning("%s: staged after %d attempts (retried: %s)", url, attempts, "; ".join(retried) or "-")
    return Staged(url, str(final), size, downloaded=True, attempts=attempts, retried=retried)


class _Incomplete(OSError):
    """The downloaded file is shorter or longer than the listing said."""


def _attempts(counter: _AttemptCounter | None, operation: str, tries: int) -> int:
    """Attempts of ``operation``: counted on the wire for S3, else our own tries."""
    if counter is not None and counter.attempts.get(operation):
        return counter.attempts[operation]
    return tries


def _sleep(backoff_s: float, tries: int) -> None:
    time.sleep(min(backoff_s * 2 ** (tries - 1), MAX_BACKOFF_S))
