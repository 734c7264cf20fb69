"""Reports in object storage, against a real S3-compatible server (moto's server mode) on 127.0.0.1.

Nothing of gpu-idle is mocked: the CLI runs as a real process and talks HTTP to
the server; a tiny HTTP proxy in front of it injects transient 503s.
"""
from __future__ import annotations

import hashlib
import http.client
import logging
import os
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import run_cli

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

from pipeline.config import StorageConfig, load_config  # noqa: E402
from pipeline.work.tasks import load_task  # noqa: E402
from pipeline.inputs.discover import discover  # noqa: E402
from pipeline.inputs.storage import StageError, stage, stage_info  # noqa: E402
from pipeline.model import Failure  # noqa: E402

FLEET_BUCKET = "gpu-profiles"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 (random port); yields its endpoint URL. Dummy credentials in the env."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in AWS_ENV.items():
            mp.setenv(key, value)
        mp.delenv("AWS_PROFILE", raising=False)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


def client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture(scope="module")
def fleet_bucket(s3, profiles) -> dict:
    """The real exports uploaded under ``s3://gpu-profiles/nightly/``, one of them a level deeper;
    plus a README that is not a report. Returns basename -> URL."""
    c = client(s3)
    c.create_bucket(Bucket=FLEET_BUCKET)
    urls = {}
    for i, path in enumerate(sorted(profiles.glob("*.sqlite"))):
        key = f"nightly/{'node-a/' if i == 0 else ''}{path.name}"
        c.upload_file(str(path), FLEET_BUCKET, key)
        urls[path.name] = f"s3://{FLEET_BUCKET}/{key}"
    c.put_object(Bucket=FLEET_BUCKET, Key="nightly/README.md", Body=b"not a report")
    return urls


def write_config(path: Path, endpoint: str, cache_dir: Path, **storage) -> Path:
    path.write_text(yaml.safe_dump({"storage": {"options": {"endpoint_url": endpoint},
                                                "cache_dir": str(cache_dir), **storage}}))
    return path


def staged_files(cache_dir: Path) -> list[Path]:
    """The staged copies (not their checksum sidecars)."""
    return sorted(p for p in cache_dir.iterdir() if not p.name.endswith(".sums.json")) if cache_dir.exists() else []


@pytest.mark.slow
def test_s3_run_equals_local_run(s3, fleet_bucket, span_run, span_fleet, profiles, tmp_path):
    """``gpu-idle run s3://bucket/prefix`` gives the local run's fleet table row for row; only
    ``report`` differs (the URL). Staged once: a rerun finds every object in the cache."""
    cache = tmp_path / "staged"
    cfg = write_config(tmp_path / "s3.yaml", s3, cache)
    out = tmp_path / "out"
    # A cache root of its own: the staged copies are read from SQLite, not from the local run's Parquet
    # cache (--no-cache would keep no staged copy either).
    proc = run_cli("run", f"s3://{FLEET_BUCKET}/nightly", "--out", str(out), "--window", "span",
                   "--config", "configs/profiles.yaml", "--config", str(cfg),
                   env={"GPU_IDLE_CACHE": str(tmp_path / "columns")})
    assert "3 report(s) found" in proc.stdout
    remote = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    local = span_fleet.copy()

    assert sorted(remote["report"].unique()) == sorted(fleet_bucket.values())
    local["report"] = local["report"].map(lambda p: fleet_bucket[os.path.basename(p)])
    order = ["report", "gpu_key"]
    remote = remote.sort_values(order).reset_index(drop=True)
    local = local.sort_values(order).reset_index(drop=True)
    assert list(remote.columns) == list(local.columns)
    assert len(remote) == len(local) and (remote["status"] == "ok").all()
    pd.testing.assert_frame_equal(remote, local)
    for rollup in ("jobs.csv", "clusters.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(out / rollup, keep_default_na=False),
                                      pd.read_csv(span_run / rollup, keep_default_na=False))

    # Staged copies: one per object, complete (no temporary files), byte-identical.
    files = staged_files(cache)
    assert [p.suffix for p in files] == [".sqlite"] * 3
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert digests == {hashlib.sha256(p.read_bytes()).hexdigest() for p in profiles.glob("*.sqlite")}
    # A rerun downloads nothing.
    options = {"endpoint_url": s3}
    for url in fleet_bucket.values():
        again = stage_info(url, options, cache)
        assert not again.downloaded and again.attempts == 0 and Path(again.path) in files


def test_stage_cache_follows_the_object_version(s3, fleet_bucket, profiles, tmp_path):
    """Same URL, same ETag: cache hit. Object overwritten in place: new ETag, fresh copy."""
    c = client(s3)
    c.create_bucket(Bucket="overwrite")
    url = "s3://overwrite/run.sqlite"
    options = {"endpoint_url": s3}
    c.upload_file(str(profiles / "tiny_2kernels.sqlite"), "overwrite", "run.sqlite")
    first = stage_info(url, options, tmp_path)
    assert first.downloaded and first.attempts == 1 and first.retried == ()
    assert stage(url, options, tmp_path) == first.path
    c.upload_file(str(profiles / "train_h100_2gpu_nccl.sqlite"), "overwrite", "run.sqlite")
    second = stage_info(url, options, tmp_path)
    assert second.downloaded and second.path != first.path
    assert Path(second.path).read_bytes() == (profiles / "train_h100_2gpu_nccl.sqlite").read_bytes()


@pytest.mark.slow
def test_listing_many_keys(s3):
    """300 objects under nested prefixes: only *.sqlite / *.nsys-rep are picked, as sorted URLs."""
    c = client(s3)
    c.create_bucket(Bucket="many-keys")
    names = [".sqlite", ".nsys-rep", ".txt", ".sqlite.truth.json", ".nsys-rep.bak"]
    keys = [f"sweep/cluster-{i % 3}/job-{i % 7}/{'rank-%d/' % (i % 4) if i % 2 else ''}r{i:03d}{names[i % 5]}"
            for i in range(300)]
    keys.append("elsewhere/r999.sqlite")  # outside the prefix
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: c.put_object(Bucket="many-keys", Key=k, Body=b"x"), keys))
    storage = StorageConfig(options={"endpoint_url": s3})

    reports = sorted(f"s3://many-keys/{k}" for k in keys
                     if k.startswith("sweep/") and k.endswith((".sqlite", ".nsys-rep")))
    assert len(reports) == 120
    paths, problems = discover(["s3://many-keys/sweep"], storage=storage)
    assert (paths, problems) == (reports, [])

    paths, problems = discover(["s3://many-keys/sweep/**/*.nsys-rep"], storage=storage)
    assert paths == [u for u in reports if u.endswith(".nsys-rep")] and len(paths) == 60 and not problems
    # The same objects named twice (prefix and glob) are listed once.
    one = next(u for u in reports if "/cluster-1/" in u and u.endswith(".sqlite"))
    paths, problems = discover(["s3://many-keys/sweep/cluster-1", "s3://many-keys/sweep/cluster-1/**/*.sqlite",
                                one], storage=storage)
    assert paths == [u for u in reports if "/cluster-1/" in u] and len(paths) == 40 and not problems


@pytest.mark.slow
def test_missing_bucket_is_an_error_row_and_the_sweep_goes_on(s3, fleet_bucket, tmp_path):
    cfg = write_config(tmp_path / "s3.yaml", s3, tmp_path / "staged")
    out = tmp_path / "out"
    tiny = fleet_bucket["tiny_2kernels.sqlite"]
    proc = run_cli("run", "s3://no-such-bucket/nightly", tiny, f"s3://{FLEET_BUCKET}/no-such-prefix",
                   "--out", str(out), "--window", "span", "--config", str(cfg), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("report")
    assert fleet.loc["s3://no-such-bucket/nightly", "status"] == "error"
    assert fleet.loc["s3://no-such-bucket/nightly", "error"] == (
        "s3://no-such-bucket/nightly: bucket 'no-such-bucket' does not exist (or these credentials cannot see it)")
    assert fleet.loc[f"s3://{FLEET_BUCKET}/no-such-prefix", "error"] == (
        f"s3://{FLEET_BUCKET}/no-such-prefix: no such object or prefix")
    assert (fleet.loc[[tiny], "status"] == "ok").all()
    assert "ERROR s3://no-such-bucket/nightly: bucket 'no-such-bucket' does not exist" in proc.stdout
    assert "2 report(s) failed" in proc.stdout


def test_object_gone_before_load_is_an_error_naming_the_url(s3, tmp_path):
    """Discovered, then deleted (or its bucket) before the worker stages it: an error value, not a crash."""
    cfg = load_config([write_config(tmp_path / "s3.yaml", s3, tmp_path / "staged")])
    for url, message in (
            (f"s3://{FLEET_BUCKET}/nightly/gone.sqlite", f"s3://{FLEET_BUCKET}/nightly/gone.sqlite: no such object"),
            ("s3://no-such-bucket/a.sqlite", "s3://no-such-bucket/a.sqlite: bucket 'no-such-bucket' does not exist")):
        result = load_task(url, cfg)
        assert isinstance(result, Failure) and result.message.startswith(message)
    assert staged_files(tmp_path / "staged") == []


class FlakyProxy:
    """HTTP proxy on 127.0.0.1 in front of the S3 server: answers the next ``fail_gets`` object
    GETs (not listings) with 503 Service Unavailable, forwards everything else."""

    def __init__(self, upstream: str):
        target = urllib.parse.urlsplit(upstream)
        self.fail_gets = 0
        self.served: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = urllib.parse.urlsplit(self.path)
                object_get = self.command == "GET" and not path.query and path.path.strip("/").count("/") >= 1
                with proxy.lock:
                    fail = object_get and proxy.fail_gets > 0
                    proxy.fail_gets -= fail
                if fail:
                    payload = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>'
                               b"<Message>injected by the test proxy</Message></Error>")
                    # Count before answering: the client may retry and give up before this thread resumes.
                    proxy.served.append((self.command, path.path, 503))
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("connection", "keep-alive", "transfer-encoding")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                proxy.served.append((self.command, path.path, resp.status))
                self.send_response(resp.status, resp.reason)
                for key, value in resp.getheaders():
                    if key.lower() in ("transfer-encoding", "connection", "server", "date") or (
                            key.lower() == "content-length" and self.command != "HEAD"):
                        continue
                    self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def failed(self) -> int:
        return sum(1 for _, _, status in self.served if status == 503)


def test_transient_failure_is_retried_and_counted(s3, fleet_bucket, profiles, tmp_path):
    """Two 503s on the object GET: botocore retries, the staging succeeds and says it took 3 attempts."""
    url = fleet_bucket["tiny_2kernels.sqlite"]
    with FlakyProxy(s3) as proxy:
        proxy.fail_gets = 2
        staged = stage_info(url, {"endpoint_url": proxy.endpoint}, tmp_path / "staged", retries=4)
        assert proxy.failed() == 2 and proxy.fail_gets == 0
    assert staged.downloaded and staged.attempts == 3
    assert staged.retried == ("GetObject: HTTP 503", "GetObject: HTTP 503")
    assert Path(staged.path).read_bytes() == (profiles / "tiny_2kernels.sqlite").read_bytes()


def test_persistent_failure_gives_up_after_the_bounded_attempts(s3, fleet_bucket, tmp_path):
    url = fleet_bucket["tiny_2kernels.sqlite"]
    with FlakyProxy(s3) as proxy:
        proxy.fail_gets = 100
        with pytest.raises(StageError) as info:
            stage_info(url, {"endpoint_url": proxy.endpoint}, tmp_path / "staged", retries=1)
        assert proxy.failed() == 2  # one try + one retry, then it stops
    message = str(info.value)
    assert message.startswith(f"{url}: cannot download object (") and message.endswith("gave up after 2 attempt(s))")
    assert staged_files(tmp_path / "staged") == []  # no half file left behind


def test_transient_failure_retried_by_gpu_idle_for_plain_http(s3, fleet_bucket, profiles, tmp_path):
    """A protocol without its own retries (https:// via fsspec's HTTP filesystem): gpu-idle retries
    with backoff and counts the attempts itself."""
    c = client(s3)
    c.create_bucket(Bucket="public")
    c.put_object(Bucket="public", Key="runs/tiny_2kernels.sqlite", ACL="public-read",
                 Body=(profiles / "tiny_2kernels.sqlite").read_bytes())
    key = "public/runs/tiny_2kernels.sqlite"
    with FlakyProxy(s3) as proxy:
        proxy.fail_gets = 1
        url = f"{proxy.endpoint}/{key}"
        staged = stage_info(url, {}, tmp_path / "staged", retries=3, backoff_s=0.05)
        assert proxy.failed() == 1
    assert staged.downloaded and staged.attempts == 2 and len(staged.retried) == 1
    assert "503" in staged.retried[0]
    assert Path(staged.path).read_bytes() == (profiles / "tiny_2kernels.sqlite").read_bytes()


def test_cli_through_a_flaky_endpoint(s3, fleet_bucket, tmp_path):
    """The whole run through the flaky proxy: the report is analysed, and the log says how many attempts."""
    url = fleet_bucket["tiny_2kernels.sqlite"]
    with FlakyProxy(s3) as proxy:
        proxy.fail_gets = 2
        cfg = write_config(tmp_path / "s3.yaml", proxy.endpoint, tmp_path / "staged")
        proc = run_cli("run", url, "--out", str(tmp_path / "out"), "--window", "span", "--config", str(cfg),
                       env={"GPU_IDLE_CACHE": str(tmp_path / "cache")})  # no stored result of an earlier test
        assert proxy.failed() == 2
    assert f"{url}: staged after 3 attempts (retried: GetObject: HTTP 503; GetObject: HTTP 503)" in proc.stderr
    fleet = pd.read_csv(tmp_path / "out" / "fleet.csv", keep_default_na=False)
    assert set(fleet["report"]) == {url} and (fleet["status"] == "ok").all()
