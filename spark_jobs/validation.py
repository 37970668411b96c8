"""Parse and validate Kafka records against a pipeline's contract (``spark_jobs.pipelines.Contract``).

:func:`parse_records` is a pure ``DataFrame -> DataFrame`` transform: every input row comes out
once, with its coordinates, the parsed fields, and ``quarantine_reason`` (null when the record is
valid). Nothing is dropped, so every source offset lands in exactly one record table
(docs/design.md, "Offset coverage").

The record is checked in one pass inside Spark's JVM, by the Java function of ``jvm/contract``
(``io.tidemark.contract.RecordCheck``): its size, UTF-8, one JSON document (as Spark's
``parse_json`` reads it), the roles, the pipeline's JSON Schema, the key. The event time's parse
and range are Spark SQL's, here, so a time means the same in every pipeline; no record goes
through Python.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from spark_jobs import jvm
from spark_jobs.contract import EARLIEST_EVENT_TIME_US, LATEST_EVENT_TIME_US, MAX_ENTITY_ID_BYTES, MAX_VALUE_BYTES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.pipelines import Column, Contract
    from spark_jobs.schema_registry import SchemaRegistry

# ISO-8601 with an explicit offset (or Z), as the contract requires.
_ISO_WITH_OFFSET = (  # no backslashes: Spark SQL string literals would eat them
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,9})?)?(Z|[+-][0-9]{2}:?[0-9]{2})$"
)


def event_time_reasons(text: str, parsed: str) -> list[tuple[str, str]]:
    """(SQL condition, SQL reason) of an event time, in order: its text ``text`` (an SQL expression) must be
    ISO-8601 with an offset, and its parse ``parsed`` (a timestamp) within what both sinks store."""
    return [
        (
            f"NOT regexp_like({text}, '{_ISO_WITH_OFFSET}') OR {parsed} IS NULL",
            "'bad_event_time: not ISO-8601 with an offset'",
        ),
        (
            f"unix_micros({parsed}) NOT BETWEEN {EARLIEST_EVENT_TIME_US} AND {LATEST_EVENT_TIME_US}",
            "'bad_event_time: outside 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z (what both sinks store)'",
        ),
    ]


# The first problem of a record: the check's own (before the time), the time's, then the rest of
# the check's (the properties' type, the schema, the key).
_REASON = "\n".join(
    [
        "CASE",
        "WHEN checked.reason IS NOT NULL THEN checked.reason",
        *[f"WHEN {when}\n  THEN {reason}" for when, reason in event_time_reasons("checked.event_time", "event_ts")],
        "ELSE coalesce(checked.late_reason, {columns}) END",
    ]
)


def source_columns(raw: DataFrame) -> list:
    """Each Kafka row's coordinates as the record tables keep them: topic, partition, offset, arrival_time (the
    Kafka timestamp), timestamp_type (Kafka's: 0 CreateTime, 1 LogAppendTime; when ``raw`` has
    ``timestampType``), key, value."""
    from pyspark.sql import functions as F

    timestamp_type = [F.col("timestampType").alias("timestamp_type")] if "timestampType" in raw.columns else []
    return ["topic", "partition", "offset", F.col("timestamp").alias("arrival_time"), *timestamp_type, "key", "value"]


def register_check(raw: DataFrame, contract: Contract, registry: SchemaRegistry | None = None) -> str:
    """The name of the SQL function that checks a record (key, value) against ``contract``,
    registered in ``raw``'s session. An Avro contract's (resolved: ``spark_jobs.avro.reader_contract``)
    decodes with the writer schemas the records' ids name, which the tasks fetch from ``registry``; each
    registration (a batch's) asks again for an id the registry did not know in the one before."""
    schema = json.dumps(contract.schema, sort_keys=True)
    rules = record_rules(contract)
    name = f"tidemark_contract_{contract.digest[:16]}_{rules.max_value_bytes}_{rules.max_entity_id_bytes}"
    if not contract.avro:
        jvm.register_contract_check(raw.sparkSession, name, schema, rules)
        return name
    if registry is None or contract.schema_version is None:
        raise AssertionError("an Avro contract is checked resolved (Settings.run_contract), with its registry")
    # One name for every batch (Spark's generated code, which names the function, is compiled once), and a
    # registration of each batch's own (an id the registry did not know is asked again by the next batch).
    reader = (contract.schema_version, schema)
    jvm.register_avro_check(raw.sparkSession, name, {}, reader, rules, registry.url, uuid.uuid4().hex)
    return name


def record_rules(contract: Contract) -> jvm.RecordRules:
    """What the contract check holds a record's value to beside its schema (:class:`spark_jobs.jvm.RecordRules`)."""
    roles = (contract.event_id, contract.entity_id, contract.event_type, contract.event_time)
    columns = tuple(c.pointer for c in contract.columns)
    key_rule = contract.key_is_entity_id
    return jvm.RecordRules(roles, contract.properties, columns, key_rule, MAX_VALUE_BYTES, MAX_ENTITY_ID_BYTES)


def _typed(i: int, column: Column) -> str:
    """The SQL of typed column ``i``: the producer's JSON text at its pointer, read as its type."""
    return f"try_variant_get(try_parse_json(checked.columns[{i}]), '$', '{column.type}')"


def _column_reason(contract: Contract) -> str:
    """The SQL of the first typed column whose value the column's type cannot hold (null: none)."""
    cases = [
        f"WHEN checked.columns[{i}] <> 'null' AND `{c.name}` IS NULL THEN "
        f"'wrong_type: {c.pointer[1:]} does not fit the column {c.name} ({c.type})'"
        for i, c in enumerate(contract.columns)
    ]
    return f"CASE {' '.join(cases)} END" if cases else "CAST(NULL AS string)"


def parse_records(raw: DataFrame, contract: Contract, registry: SchemaRegistry | None = None) -> DataFrame:
    """Kafka source rows -> one row per record with parsed fields and ``quarantine_reason``.

    Output columns: topic, partition, offset, arrival_time (the Kafka timestamp), key, value,
    event_id, entity_id, event_type, event_time, properties (JSON text, in the Variant's canonical
    form), the contract's typed columns (a value their type cannot hold quarantines the record),
    quarantine_reason, and timestamp_type (Kafka's: 0 CreateTime, 1 LogAppendTime) when
    ``raw`` has ``timestampType``. Parsed fields are null for quarantined rows.
    """
    from pyspark.sql import functions as F

    timestamp_type = ["timestamp_type"] if "timestampType" in raw.columns else []
    check = register_check(raw, contract, registry)
    checked = raw.select(*source_columns(raw), F.expr(f"{check}(key, value)").alias("checked")).select(
        "*",
        F.expr("try_to_timestamp(checked.event_time)").alias("event_ts"),
        *[F.expr(_typed(i, c)).alias(c.name) for i, c in enumerate(contract.columns)],
    )
    checked = checked.withColumn("quarantine_reason", F.expr(_REASON.replace("{columns}", _column_reason(contract))))
    valid = F.col("quarantine_reason").isNull()
    return checked.select(
        "topic",
        "partition",
        "offset",
        "arrival_time",
        "key",
        "value",
        F.when(valid, F.col("checked.event_id")).alias("event_id"),
        F.when(valid, F.col("checked.entity_id")).alias("entity_id"),
        F.when(valid, F.col("checked.event_type")).alias("event_type"),
        F.when(valid, F.col("event_ts")).alias("event_time"),
        # The producer's text as Spark's Variant writes it back (keys sorted, numbers canonical), by the check.
        F.when(valid, F.col("checked.properties")).alias("properties"),
        *[F.when(valid, F.col(c.name)).alias(c.name) for c in contract.columns],
        "quarantine_reason",
        *timestamp_type,
    )
