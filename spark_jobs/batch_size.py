"""How many records a scheduled run's batch reads at most when the cap is ``auto`` (the default): as many as the
memory of the JVM that holds a batch's frozen frames can keep, given the size of the topic's records.

A batch freezes its records as it plans them (parsed and validated, ranked, the touched entities: Spark local
checkpoints, kept in the block manager's memory and spilled to disk beyond it). A batch is cheapest when it is
large (its fixed seconds are paid once) and its frames stay in memory (a spill writes and reads them again):

    cap = (heap - 300 MiB) * spark.memory.fraction * FROZEN_SHARE / (FROZEN_BYTES + FROZEN_PER_BYTE * record bytes)

``heap`` is the driver JVM's maximum heap (in local mode the executors are that JVM; on a cluster the driver's
is the bound this takes, a batch's frames being spread over the executors); ``300 MiB`` and
``spark.memory.fraction`` are Spark's reserved memory and unified-memory share; ``FROZEN_SHARE`` leaves the
rest to execution (joins, aggregates, the writes). The bytes a record's frozen rows take were measured: the
frames' memory size when a batch ends (Spark's RDD storage info), one batch of 100,000 records of
``tidemark produce``'s mix: 563 bytes a record for records of 186 bytes (key and value), 3,044 for records of
1,983 bytes (longer ids): about 300 bytes plus 1.4 per byte. A 2 GiB driver so reads about 1.1 million such
records a batch: the bench's 1M events in one batch, which took 20.5 s where three batches at the fixed
500,000 cap before took 37-38.5 s (the profile of issue 81). The records' size is sampled from the newest
records of each partition. The cap is kept between :data:`SMALLEST` and :data:`LARGEST`.
"""

from __future__ import annotations

import logging
import statistics
from typing import TYPE_CHECKING

from spark_jobs.committed import committed_records
from spark_jobs.offsets import PartitionRange, watermarks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.settings import Settings

logger = logging.getLogger(__name__)
AUTO = "auto"
RESERVED_BYTES = 300 * 1024 * 1024  # Spark's reserved system memory
FROZEN_SHARE = 0.6  # of Spark's unified memory, for one batch's frozen frames
FROZEN_BYTES = 300  # a record's frozen rows, apart from its payload (measured; see the module's doc)
FROZEN_PER_BYTE = 1.4  # a record's frozen rows per byte of its key and value (measured)
SAMPLE = 64  # newest records per partition whose size is averaged
SMALLEST, LARGEST = 50_000, 5_000_000
ASSUMED_RECORD_BYTES = 1_024  # when the topic has no record to sample


def resolved(spark: SparkSession, settings: Settings, cap: int | str | None, unread: int | None = None) -> int | None:
    """A run's records per batch at most (None: no cap): ``cap`` as it is, or for ``auto`` :func:`auto_cap` of
    the run's topic. A run with no more than :data:`SMALLEST` ``unread`` records reads them in one batch without
    sampling any."""
    if cap != AUTO:
        return cap if isinstance(cap, int) and cap else None
    if unread is not None and unread <= SMALLEST:
        return SMALLEST
    chosen = auto_cap(spark, settings, settings.topic)
    logger.info("batches of at most %s records (auto: the driver's memory, the topic's records' size)", chosen)
    return chosen


def auto_cap(spark: SparkSession, settings: Settings, topic: str) -> int:
    """The records per batch at most for ``topic`` on this driver (see the module's doc)."""
    heap = int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())  # type: ignore[union-attr]
    fraction = float(spark.conf.get("spark.memory.fraction", "0.6") or 0.6)
    return cap_for(heap, fraction, mean_record_bytes(settings, topic))


def cap_for(heap_bytes: int, memory_fraction: float, record_bytes: float) -> int:
    """The cap for a JVM of ``heap_bytes`` and records of ``record_bytes`` (key and value) on average."""
    unified = max(0, heap_bytes - RESERVED_BYTES) * memory_fraction
    per_record = FROZEN_BYTES + FROZEN_PER_BYTE * record_bytes
    return int(min(LARGEST, max(SMALLEST, unified * FROZEN_SHARE / per_record)))


def mean_record_bytes(settings: Settings, topic: str) -> float:
    """The mean size (key and value) of the newest :data:`SAMPLE` committed records of each of ``topic``'s
    partitions; :data:`ASSUMED_RECORD_BYTES` when it holds none."""
    held = watermarks(settings, topic).items()
    newest = [PartitionRange(topic, p, max(low, high - SAMPLE), high) for p, (low, high) in held]
    sizes = [
        len(m.key() or b"") + len(m.value() or b"")
        for m in committed_records(settings, [r for r in newest if r.size], timeout_s=10.0, group_id="tidemark-sizing")
    ]
    return statistics.fmean(sizes) if sizes else float(ASSUMED_RECORD_BYTES)
