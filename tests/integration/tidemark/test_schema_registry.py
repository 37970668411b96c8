"""The local schema registry (Apicurio, started as `tidemark up` starts it) and tidemark's client of its
Confluent-compatible API, against each other and against Confluent's own client."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import replace

import pytest

from spark_jobs.errors import ConfigError
from spark_jobs.schema_registry import RegistryUnavailable, SchemaRegistry
from spark_jobs.secrets import redact
from spark_jobs.settings import Settings
from tests.ports import free_port


def schema(first: str, *added: str, default: bool = True) -> str:
    """An order's schema: the field ``first``, then the fields ``added`` (with a default: a BACKWARD change)."""
    more = [{"name": f, "type": "string", **({"default": ""} if default else {})} for f in added]
    return json.dumps({"type": "record", "name": "Order", "fields": [{"name": first, "type": "string"}, *more]})


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


def test_the_local_registry_refuses_a_version_older_records_cannot_be_read_with(registry, settings: Settings) -> None:
    """BACKWARD, as Confluent's default: a field added without a default cannot be read from older records."""
    client = SchemaRegistry(settings.schema_registry_url)
    subject = f"orders-{uuid.uuid4().hex[:8]}-value"
    client.register(subject, schema("id"))
    with pytest.raises(ConfigError, match="HTTP 409"):
        client.register(subject, schema("id", "customer", default=False))
    assert client.register(subject, schema("id", "customer")) and client.latest(subject).version == 2


AVRO_PIPELINES = {
    "pipelines": [
        {
            "name": "orders",
            "topic": "orders",
            "contract": {"format": "avro", "event_id": "/id", "entity_id": "/customer", "event_time": "/at"},
        }
    ]
}


def test_up_runs_the_registry_when_a_pipeline_reads_avro_and_keeps_its_ids_until_down(tmp_path, stack) -> None:
    """`tidemark up`, `status`, `doctor` and `down` as a user runs them, on a home and ports of their own."""
    import yaml

    from tests.integration.tidemark.test_errors import tidemark

    pipelines = tmp_path / "pipelines.yaml"
    pipelines.write_text(yaml.safe_dump(AVRO_PIPELINES))
    ports = {name: str(free_port()) for name in ("KAFKA", "KAFKA_CONTROLLER", "POSTGRES", "SCHEMA_REGISTRY")}
    env = {f"TIDEMARK_{name}_PORT": port for name, port in ports.items()}
    home = stack.home / "runs" / f"up-{uuid.uuid4().hex[:8]}"  # PostgreSQL's user must reach it, as in .tidemark
    env |= {"TIDEMARK_HOME": str(home), "TIDEMARK_JARS_DIR": str(stack.jars_dir), "TIDEMARK_PIPELINES": str(pipelines)}
    url = f"http://127.0.0.1:{ports['SCHEMA_REGISTRY']}/apis/ccompat/v7"
    try:
        up = tidemark(["up"], env, tmp_path)
        assert up.returncode == 0 and "schema registry started" in up.stdout, up.stdout + up.stderr
        schema_id = SchemaRegistry(url).register("orders-value", schema("id"))
        status = tidemark(["status"], env, tmp_path)
        assert status.returncode == 0 and f"registry  127.0.0.1:{ports['SCHEMA_REGISTRY']}" in status.stdout
        doctor = tidemark(["doctor"], env, tmp_path)
        assert "ok    schema registry" in doctor.stdout and "ok    java 21+ (registry)" in doctor.stdout, doctor.stdout
        # A restart keeps the schemas and their ids: a record names its writer schema by id.
        assert "schema registry stopped" in tidemark(["down"], env, tmp_path).stdout
        assert tidemark(["up"], env, tmp_path).returncode == 0
        assert SchemaRegistry(url).latest("orders-value").schema_id == schema_id
    finally:
        down = tidemark(["down"], env, tmp_path)
    assert down.returncode == 0 and "schema registry stopped" in down.stdout, down.stdout + down.stderr
    with pytest.raises(RegistryUnavailable):
        SchemaRegistry(url).latest("orders-value")
    shutil.rmtree(home)
