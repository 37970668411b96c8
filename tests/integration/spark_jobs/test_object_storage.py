"""Delta tables and streaming checkpoints on an S3-compatible store, through s3a, as a user sets it up.

The store is moto's S3 server (from PyPI) on a local port. Every command runs as a user runs it
(the installed ``tidemark`` script, in a child process, with its own Spark) with the configuration
the README gives: ``TIDEMARK_LAKE_ROOT`` / ``TIDEMARK_CHECKPOINT_ROOT`` on ``s3a://``, the
endpoint in ``$SPARK_CONF_DIR/spark-defaults.conf``, the credentials in the environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from spark_jobs.offsets import watermarks
from spark_jobs.settings import Settings
from tests.integration.spark_jobs.checks import query
from tests.ports import free_port
from tidemark.producer import ProduceSpec, produce

# The distributed shape: `make test-deploy`, not `make test`.
pytestmark = pytest.mark.deploy

BIN = Path(sys.executable).parent
TIDEMARK = shutil.which("tidemark", path=str(BIN))
BUCKET = "tidemark-lake"


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """moto's S3 server on a free local port, with an empty bucket; stopped afterwards."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=5)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


def s3_keys(endpoint: str, prefix: str) -> list[str]:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_ingest_replay_and_reconcile_with_the_lake_and_checkpoints_on_s3(
    database: Settings, topic, s3_endpoint, tmp_path
) -> None:
    stack = database  # a database of its own: reconcile checks every pipeline it holds
    root = f"s3a://{BUCKET}/{uuid.uuid4().hex[:8]}"
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    # The store's address (only needed for a store that is not AWS itself); no secret in the file.
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.hadoop.fs.s3a.endpoint {s3_endpoint}\n"
        "spark.hadoop.fs.s3a.endpoint.region us-east-1\n"
        "spark.hadoop.fs.s3a.path.style.access true\n"
        "spark.hadoop.fs.s3a.connection.ssl.enabled false\n"
        "spark.hadoop.fs.s3a.aws.credentials.provider "
        "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")},
        **stack.to_env(),
        "TIDEMARK_TOPIC": topic,
        "TIDEMARK_LAKE_ROOT": f"{root}/lake",
        "TIDEMARK_CHECKPOINT_ROOT": f"{root}/checkpoints",
        "SPARK_CONF_DIR": str(conf_dir),
        "AWS_ACCESS_KEY_ID": "test",  # moto accepts any credentials
        "AWS_SECRET_ACCESS_KEY": "test",
    }

    def tidemark(*args: str) -> str:
        assert TIDEMARK is not None, f"no tidemark script in {BIN}"
        result = subprocess.run([TIDEMARK, *args], env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        return result.stdout

    spec = ProduceSpec(count=300, entities=6, duplicate_rate=0.1, malformed_rate=0.05, seed=31, id_prefix=topic)
    first = produce(stack, spec, topic=topic, partitions=2)
    assert f"ingest:{topic} batch 0: read {first.committed}" in tidemark("ingest")
    # The second run starts where Spark's offset log on S3 says the first one ended.
    later = produce(stack, ProduceSpec(count=100, entities=6, seed=32, id_prefix=topic + "b"), topic=topic)
    assert f"ingest:{topic} batch 1: read {later.committed}" in tidemark("ingest")
    # A replay of processed offsets; reconcile then finds every record once in the sinks on S3. Entities
    # hash to partitions by key, and the keys carry the topic's random name: replay the fuller partition.
    partition, (_, high) = max(watermarks(stack, topic).items(), key=lambda item: item[1][1])
    end = min(100, high)
    assert f"backfill:{topic} batch 0: read {end} " in tidemark("backfill", "--offsets", f"{partition}:0-{end}")
    out = tidemark("reconcile")
    assert ": OK: " in out and " 0 mismatched, 0 expired, 0 gaps, sessions match" in out, out

    keys = s3_keys(s3_endpoint, root.removeprefix(f"s3a://{BUCKET}/"))
    assert any("/lake/events/_delta_log/" in k for k in keys) and any("/lake/sessions/_delta_log/" in k for k in keys)
    assert {f"checkpoints/ingest-{topic}/offsets/{n}" for n in (0, 1)} <= {k.split("/", 1)[1] for k in keys}
    [(read,)] = query(stack, "SELECT sum(records_read) FROM ledger_batches WHERE pipeline = %s", f"ingest:{topic}")
    assert read == first.committed + later.committed
