"""Spark's streaming checkpoint of a scheduled pipeline, read through Hadoop's FileSystem.

The checkpoint lives wherever ``TIDEMARK_CHECKPOINT_ROOT`` says: a local path, ``file://``,
``s3a://`` or any filesystem Spark's Hadoop configuration reaches, so it is read the way Spark
writes it, never with ``pathlib``. Spark keeps, per batch id ``N``:

* ``offsets/N``: the batch's end offsets, written *before* the batch runs (the batch is frozen);
* ``commits/N``: written after the batch's foreachBatch returned.

A batch with ``offsets/N`` and no ``commits/N`` is frozen and uncommitted: every restart replays it
with exactly those offsets (:func:`unfreeze` lets Spark plan it again, smaller).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from spark_jobs import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class OffsetLog:
    """The ``offsets`` and ``commits`` logs under one query's checkpoint location."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        self._spark = spark
        self.location = location.rstrip("/")

    def _path(self, log: str, batch_id: int) -> str:
        return f"{self.location}/{log}/{batch_id}"

    def _read(self, log: str, batch_id: int) -> str | None:
        return jvm.read_text(self._spark, self._path(log, batch_id))

    def ends(self, batch_id: int, topic: str) -> dict[int, int] | None:
        """End offsets Spark froze for ``batch_id`` (None when there is no such entry)."""
        text = self._read("offsets", batch_id)
        if text is None:
            return None
        # Format: a version line, a metadata line, then one JSON line per source.
        source = json.loads(text.splitlines()[2])
        return {int(p): int(o) for p, o in source[topic].items()}

    def starts(self, batch_id: int, topic: str) -> dict[int, int] | None:
        """Where ``batch_id`` starts: the previous batch's ends, or for batch 0 the offsets the
        stream began at (the Kafka source's initial offsets, ``sources/0/0``). None when unknown."""
        if batch_id > 0:
            return self.ends(batch_id - 1, topic)
        text = jvm.read_text(self._spark, f"{self.location}/sources/0/0")
        if text is None:
            return None
        # Format: a NUL byte (Spark 2.1 compatibility), a version line, then the offsets as JSON.
        source = json.loads(text.splitlines()[-1])
        return {int(p): int(o) for p, o in source[topic].items()}

    def _batch_ids(self, log: str) -> list[int]:
        return sorted(int(name) for name in jvm.list_names(self._spark, f"{self.location}/{log}") if name.isdigit())

    def committed(self) -> list[int]:
        """The ids of the batches Spark committed that the logs still hold (Spark keeps the last
        ``spark.sql.streaming.minBatchesToRetain``), in order."""
        return self._batch_ids("commits")

    def last_frozen(self) -> int | None:
        """The id of the last batch Spark froze, committed or not (None before the first)."""
        frozen = self._batch_ids("offsets")
        return frozen[-1] if frozen else None

    def frozen_uncommitted(self) -> int | None:
        """The id of the batch Spark froze but never committed, if any (the one a restart replays)."""
        frozen, committed = self._batch_ids("offsets"), self._batch_ids("commits")
        if not frozen or (committed and committed[-1] >= frozen[-1]):
            return None
        return frozen[-1]

    def unfreeze(self, batch_id: int) -> None:
        """Remove ``offsets/<batch_id>`` of an uncommitted batch: the next run plans that batch again."""
        if self.frozen_uncommitted() != batch_id:
            raise ValueError(f"batch {batch_id} of {self.location} is not the last frozen, uncommitted batch")
        jvm.delete(self._spark, self._path("offsets", batch_id))
        # The checksum file Hadoop's local filesystem writes next to it would outlive it.
        jvm.delete(self._spark, f"{self.location}/offsets/.{batch_id}.crc")
