"""Airflow connections become tidemark's settings: Kafka's extra, PostgreSQL's DSN."""

from __future__ import annotations

import pytest

from spark_jobs.settings import Settings
from tidemark_airflow.connections import kafka_env, postgres_dsn


def test_kafka_connection_extra_becomes_settings_with_pass_through_options() -> None:
    extra = {"bootstrap.servers": "k1:9092,k2:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    env = kafka_env(extra)
    settings = Settings.from_env(env)
    assert settings.bootstrap_servers == "k1:9092,k2:9092"
    assert settings.kafka_options == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    with pytest.raises(ValueError, match="no bootstrap.servers"):
        kafka_env({"security.protocol": "SSL"})


def test_postgres_connection_becomes_a_libpq_dsn() -> None:
    from psycopg2.extensions import parse_dsn

    dsn = parse_dsn(postgres_dsn("db.internal", 6432, "tidemark", "pipeline", "s3 cret'", {"sslmode": "require"}))
    assert dsn == {
        "host": "db.internal", "port": "6432", "dbname": "tidemark", "user": "pipeline", "password": "s3 cret'",
        "sslmode": "require",
    }  # fmt: skip
    with pytest.raises(ValueError, match="needs a host and a database"):
        postgres_dsn("h", None, None, "u", None)


def test_a_schema_registry_connection_becomes_the_registry_url_with_its_credentials_never_shown() -> None:
    from spark_jobs.schema_registry import SchemaRegistry
    from tidemark_airflow.connections import registry_url

    url = registry_url("https://registry.example.com:8443/apis/ccompat/v7", "reader@team", "p@ss:w/rd")
    assert url == "https://reader%40team:p%40ss%3Aw%2Frd@registry.example.com:8443/apis/ccompat/v7"
    settings = Settings.from_env({"TIDEMARK_SCHEMA_REGISTRY_URL": url})
    assert settings.schema_registry_url == url and "p@ss:w/rd" in settings.secrets()
    assert SchemaRegistry(url).shown == "https://registry.example.com:8443/apis/ccompat/v7"
    assert registry_url("https://registry.example.com", None, None) == "https://registry.example.com"
    with pytest.raises(ValueError, match="must be the registry's URL"):
        registry_url("registry.example.com", "u", "p")
