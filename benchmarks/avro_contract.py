"""The contract stage's Avro row (C2): the same records as C0 and C1, Avro in Confluent's framing, decoded and
checked in the JVM (``io.tidemark.contract.AvroCheck``) with the writer schema fetched from a real registry.

Each good record of the produced mix (a JSON object of today's ``events``) is written as Avro of
:data:`EVENTS_AVRO`, its value's fields one for one; a record that is not one (the malformed kinds) keeps its
bytes and is ``not_avro``. The pipeline's contract is today's, with ``format: avro``.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from benchmarks.context import BenchContext
    from spark_jobs.pipelines import Contract
    from spark_jobs.schema_registry import SchemaRegistry

EVENTS_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "tidemark.bench",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "entity_id", "type": "string"},
        {"name": "event_type", "type": "string"},
        {"name": "event_time", "type": "string"},
        {
            "name": "properties",
            "type": {
                "type": "record",
                "name": "Properties",
                "fields": [{"name": "page", "type": "string"}, {"name": "value", "type": "long"}],
            },
        },
    ],
}


@dataclass(frozen=True)
class AvroRecords:
    """The Avro copy of the contract stage's records, the contract that reads them and the registry."""

    raw: DataFrame
    contract: Contract
    registry: SchemaRegistry
    stop: Callable[[], str]  # stops the registry when this stage started it; what it did


def avro_records(ctx: BenchContext, rows: list[tuple], subject: str) -> AvroRecords:
    """``rows`` (topic, partition, offset, key, value) with each good value as Avro, in Parquet beside the JSON's."""
    import fastavro
    from pyspark.sql import functions as F

    from spark_jobs.pipelines import EVENTS_CONTRACT
    from tidemark.embedded.schema_registry import SchemaRegistry as LocalRegistry

    local = LocalRegistry(ctx.settings)
    started = not local.is_running()
    ctx.record.progress(local.start())
    registry = ctx.settings.schema_registry()
    schema_id = registry.register(subject, json.dumps(EVENTS_AVRO))
    parsed = fastavro.parse_schema(EVENTS_AVRO)
    header = b"\x00" + struct.pack(">I", schema_id)

    def encoded(value: bytes) -> bytes:
        try:
            datum = json.loads(value)
            body = io.BytesIO()
            fastavro.schemaless_writer(body, parsed, datum)
        except (ValueError, TypeError, KeyError, AttributeError):  # a malformed record: its bytes as they were
            return value
        return header + body.getvalue()

    path = str(ctx.work / "contract-records-avro.parquet")
    avro_rows = [(*row[:4], None if row[4] is None else encoded(row[4])) for row in rows]
    schema = "topic string, partition int, offset long, key binary, value binary"
    frame = ctx.spark.createDataFrame(avro_rows, schema).withColumn("timestamp", F.current_timestamp())
    frame.write.parquet(path)
    contract = replace(
        EVENTS_CONTRACT,
        format="avro",
        subject=subject,
        schema=EVENTS_AVRO,
        schema_version=registry.latest(subject).version,
    )
    return AvroRecords(ctx.spark.read.parquet(path), contract, registry, local.stop if started else lambda: "")


def checked(records: AvroRecords) -> DataFrame:
    """The records parsed and checked as an Avro pipeline's batch is: the ids its values name read first (one
    Spark job), their schemas from the registry, then the decode and check."""
    from spark_jobs.validation import parse_records

    return parse_records(records.raw, records.contract, records.registry)
