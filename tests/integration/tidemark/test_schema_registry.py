"""The local schema registry (Apicurio, started as `tidemark up` starts it) and tidemark's client of its
Confluent-compatible API, against each other and against Confluent's own client."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from spark_jobs.errors import ConfigError
from spark_jobs.schema_registry import RegistryUnavailable, SchemaRegistry
from spark_jobs.secrets import redact
from spark_jobs.settings import Settings
from tests.integration.tidemark.test_errors import free_port


def schema(*fields: str) -> str:
    return json.dumps({"type": "record", "name": "Order", "fields": [{"name": f, "type": "string"} for f in fields]})


def test_the_client_reads_versions_and_ids_that_confluents_serializer_registered(registry, settings: Settings) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    subject = f"orders-{uuid.uuid4().hex[:8]}-value"
    client = SchemaRegistry(settings.schema_registry_url)
    first = client.register(subject, schema("id"))
    confluent = SchemaRegistryClient({"url": settings.schema_registry_url})
    context = SerializationContext(subject.removesuffix("-value"), MessageField.VALUE)
    value = AvroSerializer(confluent, schema("id", "customer"))({"id": "o-1", "customer": "c-7"}, context)

    second = int.from_bytes(value[1:5], "big")  # Confluent's framing: a zero byte, the id, the body
    assert value[0] == 0 and second != first
    latest = client.latest(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(latest.schema)["fields"][1]["name"] == "customer"
    assert client.version(subject, 1).schema_id == first
    assert client.schema(second) is not None and client.schema(10**9) is None
    assert AvroDeserializer(confluent)(value, context) == {"id": "o-1", "customer": "c-7"}


def test_a_subject_without_schemas_is_one_line_saying_how_to_register_one(registry, settings: Settings) -> None:
    client = SchemaRegistry(settings.schema_registry_url)
    with pytest.raises(ConfigError, match=r"has no subject 'nobody-value': register the producers' schema"):
        client.latest("nobody-value")


def test_a_registry_that_does_not_answer_is_one_line_without_the_password(settings: Settings) -> None:
    port = free_port()
    url = f"http://reader:s3cret-pw@127.0.0.1:{port}/apis/ccompat/v7"
    with pytest.raises(RegistryUnavailable) as raised:
        SchemaRegistry(url).latest("orders-value")
    line = str(raised.value)
    assert "\n" not in line and "does not answer" in line and "tidemark up" in line, line
    assert "s3cret-pw" not in line and f"127.0.0.1:{port}" in line, line
    # Settings that carry such a URL count its password among their secrets: never printed.
    carried = replace(settings, schema_registry_url=url)
    assert "s3cret-pw" in carried.secrets()
    assert redact("the password s3cret-pw", carried.secrets()) == "the password ***"
