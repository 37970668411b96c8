"""Spark's Kafka source as tidemark uses it: committed records only, loss is an error by default."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from spark_jobs.offsets import PartitionRange, spark_offsets
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamReader


# How long the broker may hold a fetch that finds no new records (the Java client's default is 500
# ms). A bounded read never waits for new records, but the task that reads a partition up to its
# end did wait that long once, for the client's fetch beyond the end (measured: ~0.5 s per such
# task, a fetch wait of 200 ms took ~0.2 s). The user's ``java.fetch.max.wait.ms`` wins.
FETCH_MAX_WAIT_MS = 10


def source_options(settings: Settings) -> dict[str, str]:
    """The Kafka source's options: the client's (``kafka.``-prefixed, ``read_committed`` forced) and
    how a batch's records are split into tasks."""
    from spark_jobs.kafka_clients import java_options

    options = {"kafka.bootstrap.servers": settings.bootstrap_servers}
    if settings.read_task_records:  # a large partition's range is read by several tasks
        options["maxRecordsPerPartition"] = str(settings.read_task_records)
    # The user's options in the Java client's names; isolation.level is always read_committed: records
    # of aborted producer transactions must never reach a sink (docs/design.md, "Message contract").
    client = {"fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS), **java_options(settings.kafka_options)}
    options.update({f"kafka.{key}": value for key, value in client.items()})
    return options


def _with_client_options(reader, settings: Settings):  # DataFrameReader / DataStreamReader
    return reader.format("kafka").options(**source_options(settings))


def read_range(spark: SparkSession, settings: Settings, ranges: list[PartitionRange]) -> DataFrame:
    """A bounded batch read of exactly ``ranges``: their partitions are assigned, so a backfill of
    some partitions of a topic reads those only (``subscribe`` would want offsets for all of them)."""
    starting, ending = spark_offsets(ranges)
    partitions: dict[str, list[int]] = {}
    for r in ranges:
        partitions.setdefault(r.topic, []).append(r.partition)
    return (
        _with_client_options(spark.read, settings)
        .option("assign", json.dumps(partitions))
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("failOnDataLoss", "true")
        .load()
    )


def stream_reader(
    spark: SparkSession,
    settings: Settings,
    topic: str,
    max_offsets_per_trigger: int | None,
    fail_on_data_loss: bool,
    starting_offsets: Mapping[int, int] | None = None,
) -> DataStreamReader:
    """Subscribe to ``topic``. ``starting_offsets`` (every partition) applies to a new checkpoint only."""
    starting = json.dumps({topic: {str(p): o for p, o in starting_offsets.items()}}) if starting_offsets else "earliest"
    reader = (
        _with_client_options(spark.readStream, settings)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader
