"""The model's records as an Avro pipeline reads them: Confluent's wire format through a real schema registry.

An Avro pipeline's contract has no JSON schema: its reader schema is the newest version of its subject
(``<topic>-value``). The model's records are written with :data:`READER` (event type an enum of ``click``
only), the release's with :data:`RELEASE` (the enum with ``signup`` too), which the producer registered under
a subject of its own: the reader cannot resolve it, so they are quarantined as ``incompatible_schema`` until
the fix registers the release's schema as the subject's next version (a compatible change under BACKWARD).
A malformed record is one of each way an Avro value cannot be read: no framing (``not_avro``), an id no
registry gives (``unknown_schema``), a body cut off or followed by more bytes (``bad_avro``).
"""

from __future__ import annotations

import copy
import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import fastavro

from spark_jobs.schema_registry import SchemaRegistry
from tests.integration.spark_jobs.model import CONTRACT_TYPES, RELEASE_TYPE, Record
from tidemark.avro_records import UNKNOWN_SCHEMA_ID

READER: dict[str, Any] = {
    "type": "record",
    "name": "ModelEvent",
    "namespace": "io.tidemark.model",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "entity_id", "type": "string"},
        {"name": "event_type", "type": {"type": "enum", "name": "EventType", "symbols": CONTRACT_TYPES}},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "n", "type": "int"},  # an integer an Edit may declare as a typed column
    ],
}
RELEASE = copy.deepcopy(READER)
RELEASE["fields"][2]["type"]["symbols"] = [*CONTRACT_TYPES, RELEASE_TYPE]
PARSED = {"reader": fastavro.parse_schema(READER), "release": fastavro.parse_schema(RELEASE)}


def contract() -> dict[str, Any]:
    """The model's contract for an Avro pipeline (its subject the default, ``<topic>-value``)."""
    return {
        "format": "avro", "event_id": "/event_id", "entity_id": "/entity_id", "event_time": "/event_time",
        "event_type": "/event_type", "key_is_entity_id": True,
    }  # fmt: skip


@dataclass
class AvroTopic:
    """The schemas of one Avro pipeline's topic in the registry, and its records' values."""

    registry: SchemaRegistry
    topic: str
    reader_id: int
    release_id: int

    @classmethod
    def registered(cls, registry: SchemaRegistry, topic: str) -> AvroTopic:
        """The reader schema as version 1 of the topic's subject; the release's under a subject of its own."""
        reader_id = registry.register(f"{topic}-value", json.dumps(READER))
        release_id = registry.register(f"{topic}-release-value", json.dumps(RELEASE))
        return cls(registry, topic, reader_id, release_id)

    def fix(self) -> int:
        """Register the release's schema as the subject's next version (the newest: the next run's reader)."""
        return self.registry.register(f"{self.topic}-value", json.dumps(RELEASE))

    def value(self, record: Record) -> bytes:
        if record.event_id is None:  # chosen by the event time, as the JSON record's malformed kind
            body = self._body(record, f"broken{record.event_time_ms}", self.reader_id)
            kind = record.event_time_ms // 1000 % 3
            if kind == 0:
                return json.dumps({"event_id": f"json{record.event_time_ms}"}).encode()  # not_avro
            if kind == 1:
                return struct.pack(">bI", 0, UNKNOWN_SCHEMA_ID) + body[5:]  # unknown_schema
            return body[:-3] if record.event_time_ms // 3000 % 2 else body + b"\x02"  # bad_avro
        if record.pending:
            return self._body(record, record.event_id, self.release_id)
        return self._body(record, record.event_id, self.reader_id)

    @staticmethod
    def _body(record: Record, event_id: str, schema_id: int) -> bytes:
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, schema_id))
        datum = {
            "event_id": event_id, "entity_id": record.entity_id,
            "event_type": RELEASE_TYPE if record.pending else CONTRACT_TYPES[0],
            "event_time": record.event_time_ms, "n": record.event_time_ms % 1_000,
        }  # fmt: skip
        fastavro.schemaless_writer(out, PARSED["release" if record.pending else "reader"], datum)
        return out.getvalue()
