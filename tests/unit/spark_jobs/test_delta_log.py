"""The Delta log read without Spark: a local table's latest version."""

from __future__ import annotations

from spark_jobs.sinks.delta_log import log_version


def test_a_local_delta_log_gives_its_version_without_spark(tmp_path) -> None:
    assert log_version(str(tmp_path / "missing")) == -1
    log = tmp_path / "events" / "_delta_log"
    log.mkdir(parents=True)
    for name in ("00000000000000000000.json", "00000000000000000001.json", "00000000000000000001.checkpoint.parquet"):
        (log / name).write_text("{}")
    assert log_version(str(tmp_path / "events")) == 1
    assert log_version(f"file://{tmp_path / 'events'}") == 1
    assert log_version("s3a://bucket/lake/events") is None
