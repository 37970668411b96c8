"""From Airflow connections to tidemark's settings.

Spark jobs read ``TIDEMARK_*`` variables (spark_jobs/settings.py). Under Airflow the Kafka and
PostgreSQL addresses and secrets come from connections instead:

* ``tidemark_kafka``: any connection type; its extra is a JSON object of Kafka client options
  (librdkafka names), at least ``bootstrap.servers``; SASL/SSL options pass through.
* ``tidemark_postgres``: a Postgres connection to the tidemark database (the pipeline role).
* ``tidemark_schema_registry`` (optional, for Avro pipelines): its host is the registry's URL (a
  Confluent-compatible API, e.g. ``https://registry.example.com`` or Apicurio's ``.../apis/ccompat/v7``),
  its login and password the registry's credentials.

:func:`tidemark_settings` builds the settings from them and from the worker's own ``TIDEMARK_*``
environment (lake and checkpoint roots, topic, jars, session rules, ...), at task run time, never
while a DAG file is parsed; ``Settings.to_env()`` then gives a job its environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from airflow.sdk.exceptions import AirflowFailException

from spark_jobs.errors import ConfigError

KAFKA_CONN_ID = "tidemark_kafka"
POSTGRES_CONN_ID = "tidemark_postgres"
REGISTRY_CONN_ID = "tidemark_schema_registry"


def kafka_env(extra: Mapping[str, object], conn_id: str = KAFKA_CONN_ID) -> dict[str, str]:
    """``TIDEMARK_KAFKA_*`` variables from a Kafka connection's extra (librdkafka options)."""
    options = {str(k): str(v) for k, v in extra.items()}
    servers = options.pop("bootstrap.servers", "")
    if not servers:
        raise ValueError(
            f"connection {conn_id!r} has no bootstrap.servers in its extra; set it to a JSON object like "
            '{"bootstrap.servers": "host:9092"} (plus any SASL/SSL client options)'
        )
    env = {"TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": servers}
    for key, value in options.items():
        env["TIDEMARK_KAFKA_OPT_" + key.upper().replace(".", "_")] = value
    return env


def postgres_dsn(host: str | None, port: int | None, database: str | None, login: str | None, password: str | None,
                 extra: Mapping[str, object] | None = None) -> str:  # fmt: skip
    """A libpq DSN from a connection's fields; extra keys (sslmode, ...) become DSN parameters."""
    from psycopg2.extensions import make_dsn

    if not host or not database:
        raise ValueError("the PostgreSQL connection needs a host and a database (schema) name")
    params = {"host": host, "port": port or 5432, "dbname": database, "user": login, "password": password}
    params |= {k: v for k, v in (extra or {}).items() if k in ("sslmode", "sslrootcert", "sslcert", "sslkey")}
    return make_dsn(None, **{k: v for k, v in params.items() if v not in (None, "")})  # None: no DSN to extend


def connections_env(kafka_conn_id: str = KAFKA_CONN_ID, postgres_conn_id: str = POSTGRES_CONN_ID) -> dict[str, str]:
    """The ``TIDEMARK_*`` variables that come from the Kafka and PostgreSQL connections."""
    from airflow.sdk import BaseHook

    kafka = BaseHook.get_connection(kafka_conn_id)
    pg = BaseHook.get_connection(postgres_conn_id)
    env = kafka_env(kafka.extra_dejson, kafka_conn_id)
    env["TIDEMARK_POSTGRES_DSN"] = postgres_dsn(pg.host, pg.port, pg.schema, pg.login, pg.password, pg.extra_dejson)
    try:
        registry = BaseHook.get_connection(REGISTRY_CONN_ID)
    except Exception:  # optional: without it, the worker's TIDEMARK_SCHEMA_REGISTRY_URL (or the local registry)
        return env
    env["TIDEMARK_SCHEMA_REGISTRY_URL"] = registry_url(registry.host or "", registry.login, registry.password)
    return env


def registry_url(url: str, login: str | None, password: str | None) -> str:
    """The schema registry's URL with ``login`` and ``password`` as its user information (how tidemark's client
    takes credentials: sent as HTTP basic authentication, never printed)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"connection {REGISTRY_CONN_ID!r}: its host must be the registry's URL, e.g. https://registry.example.com"
        )
    if not login:
        return url
    user = urllib.parse.quote(login, safe="") + (":" + urllib.parse.quote(password, safe="") if password else "")
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def connection_secrets(kafka_conn_id: str = KAFKA_CONN_ID, postgres_conn_id: str = POSTGRES_CONN_ID) -> list[str]:
    """The secrets the tidemark connections hold (the PostgreSQL password, Kafka's secret options).

    For redacting text that leaves Airflow (alerts); a connection that does not exist holds none.
    """
    from airflow.sdk import BaseHook

    from spark_jobs.secrets import option_secrets

    found: list[str] = []
    for conn_id in (postgres_conn_id, kafka_conn_id, REGISTRY_CONN_ID):
        try:
            conn = BaseHook.get_connection(conn_id)
        except Exception:  # missing or unreadable: nothing to redact from it
            continue
        found += [conn.password] if conn.password else []
        found += option_secrets(conn.extra_dejson)
    return found


def tidemark_settings(
    pipeline: str | None = None, kafka_conn_id: str = KAFKA_CONN_ID, postgres_conn_id: str = POSTGRES_CONN_ID
):  # -> Settings
    """Settings from this worker's ``TIDEMARK_*`` environment, with the connections' addresses and secrets,
    for a run of ``pipeline`` (its topic, rules, tables, schema and lock) as the pipelines file declares it."""
    from spark_jobs.settings import Settings

    worker = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_KAFKA_OPT_")}
    settings = Settings.from_env(worker | connections_env(kafka_conn_id, postgres_conn_id))
    return settings.for_pipeline(declared_or_refused(settings, pipeline)) if pipeline else settings


class PipelineRefused(AirflowFailException, ConfigError):
    """A task of a pipeline the file does not declare, or declares with a problem: failed, not retried."""


def declared_or_refused(settings, name: str):  # (Settings) -> Pipeline
    """The pipeline ``name`` as the file declares it; a task of a pipeline not declared, or declared with a problem,
    fails at once with the problem's lines (an ``AirflowFailException``: no retry can help until the file is
    fixed)."""
    try:
        return settings.declared(name)
    except ConfigError as exc:
        raise PipelineRefused(f"pipeline {name!r} cannot run: {exc}") from None
