"""Today's contract check before the Java one (``spark_jobs.validation``): Spark SQL over the Variant.

This was tidemark's fixed-contract check until the check moved into Spark's JVM (docs/adr/0004).
It stays as two things: the bench's baseline for the contract check's cost (stage ``contract``), and
the reference the differential test holds the Java check to for the contract of the pipeline
``events``: the same records accepted, the same fields, the same reason for each rejected one
(tests/unit/spark_jobs/test_validation.py). It is not used by the pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.contract import MAX_ENTITY_ID_BYTES, MAX_VALUE_BYTES
from spark_jobs.validation import event_time_reasons, source_columns

# The fixed contract's fields.
REQUIRED_FIELDS = ("event_id", "entity_id", "event_type", "event_time")
FIELDS = (*REQUIRED_FIELDS, "properties")

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# JSON's insignificant whitespace, as the characters themselves (Spark SQL literals would eat backslashes).
_JSON_WHITESPACE = " \t\r\n"


# Spark's JSON parsers (``parse_json`` included) stop after the first document and ignore what
# follows, so ``{...}\n{...}`` (two events in one value) parsed as its first event and the second
# vanished. Wrapped in ``[...]``, the value must be an array of exactly one element: text after the
# document breaks it (no comma) or adds an element (a comma), unless that text starts with ``]``.
# Only a value holding a ``]`` can do that; those are also wrapped in ``{"k": ...}``, which such
# text breaks. (Each wrap is one more parse of the value.)
_TEXT_AFTER_THE_DOCUMENT = (
    "json_array_length(concat('[', text, ']')) IS DISTINCT FROM 1 "
    """OR (contains(text, ']') AND json_object_keys(concat('{"k":', text, '}')) IS NULL)"""
)


def _reason_sql() -> str:
    """One SQL CASE naming the first contract violation of a row, NULL when there is none.

    It reads the columns :func:`variant_parse_records` extracts once per record: ``text`` (the value as a
    string), ``doc`` (the Variant), ``ts_event_time``, and per field ``v_<name>`` (its Variant),
    ``t_<name>`` (its type) and, for the required ones, ``s_<name>`` (its text).
    """
    checks = [
        ("key IS NULL", "'null_key'"),
        (
            f"octet_length(value) > {MAX_VALUE_BYTES}",
            f"'oversized: value is larger than {MAX_VALUE_BYTES} bytes'",
        ),
        ("value IS NULL", "'null_value'"),
        ("NOT is_valid_utf8(text)", "'not_utf8'"),
        ("doc IS NULL", "'invalid_json'"),
        (_TEXT_AFTER_THE_DOCUMENT, "'invalid_json: text after the JSON object'"),
        # The document parsed, so it is an object exactly when its first character is '{'.
        (f"NOT startswith(TRIM(LEADING '{_JSON_WHITESPACE}' FROM text), '{{')", "'not_an_object'"),
    ]
    for name in REQUIRED_FIELDS:
        checks.append((f"v_{name} IS NULL OR t_{name} = 'VOID'", f"'missing_field: {name}'"))
        checks.append((f"t_{name} <> 'STRING'", f"'wrong_type: {name} must be a string'"))
    checks += [
        ("length(s_event_id) = 0", "'missing_field: event_id is empty'"),
        ("length(s_entity_id) = 0", "'missing_field: entity_id is empty'"),
        ("length(s_event_type) = 0", "'missing_field: event_type is empty'"),
        ("contains(s_entity_id, chr(0))", "'bad_entity_id: entity_id contains a NUL character'"),
        (
            f"octet_length(s_entity_id) > {MAX_ENTITY_ID_BYTES}",
            f"'bad_entity_id: entity_id is longer than {MAX_ENTITY_ID_BYTES} bytes'",
        ),
        *event_time_reasons("s_event_time", "ts_event_time"),
        (
            "v_properties IS NOT NULL AND t_properties NOT IN ('VOID') AND NOT startswith(t_properties, 'OBJECT')",
            "'wrong_type: properties must be an object'",
        ),
        ("cast(key AS string) <> s_entity_id", "'key_mismatch: key is not the entity_id'"),
    ]
    whens = "\n".join(f"WHEN {condition} THEN {reason}" for condition, reason in checks)
    return f"CASE {whens} ELSE NULL END"


def variant_parse_records(raw: DataFrame) -> DataFrame:
    """Kafka source rows -> one row per record with parsed fields and ``quarantine_reason``.

    Output columns: topic, partition, offset, arrival_time (the Kafka timestamp), key, value,
    event_id, entity_id, event_type, event_time, properties (JSON text), quarantine_reason, and
    timestamp_type (Kafka's: 0 CreateTime, 1 LogAppendTime) when ``raw`` has ``timestampType``.
    Parsed fields are null for quarantined rows.
    """
    from pyspark.sql import functions as F

    timestamp_type = ["timestamp_type"] if "timestampType" in raw.columns else []
    with_doc = raw.select(*source_columns(raw), F.expr("cast(value AS string)").alias("text")).select(
        "*",
        F.expr(
            f"CASE WHEN octet_length(value) <= {MAX_VALUE_BYTES} AND is_valid_utf8(text) THEN try_parse_json(text) END"
        ).alias("doc"),
    )
    # Each field is extracted, typed and cast once, and the checks and the output read those.
    fields = with_doc.select(
        "*",
        *[F.expr(f"variant_get(doc, '$.{name}')").alias(f"v_{name}") for name in FIELDS],
    )
    fields = fields.select(
        "*",
        *[F.expr(f"schema_of_variant(v_{name})").alias(f"t_{name}") for name in FIELDS],
        *[F.expr(f"v_{name}::string").alias(f"s_{name}") for name in REQUIRED_FIELDS],
    ).withColumn("ts_event_time", F.expr("try_to_timestamp(s_event_time)"))
    checked = fields.withColumn("quarantine_reason", F.expr(_reason_sql()))
    valid = F.col("quarantine_reason").isNull()

    def parsed(expression: str):  # a Column
        return F.when(valid, F.expr(expression))

    return checked.select(
        "topic",
        "partition",
        "offset",
        "arrival_time",
        "key",
        "value",
        parsed("s_event_id").alias("event_id"),
        parsed("s_entity_id").alias("entity_id"),
        parsed("s_event_type").alias("event_type"),
        parsed("ts_event_time").alias("event_time"),
        parsed("to_json(v_properties)").alias("properties"),
        "quarantine_reason",
        *timestamp_type,
    )
