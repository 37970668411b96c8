"""One set of Kafka client options, two clients: librdkafka (confluent-kafka) and Spark's Java client.

Users give librdkafka's names (``TIDEMARK_KAFKA_OPT_*``, or the ``tidemark_kafka`` connection's
extra), as the confluent-kafka documentation writes them. Most mean the same to the Java client;
the ones that differ are mapped here:

==================================  ==================================================================
librdkafka                          Java (Spark's ``kafka.*`` options)
==================================  ==================================================================
``sasl.mechanisms``                 ``sasl.mechanism``
``sasl.username`` + ``sasl.password``  ``sasl.jaas.config`` (PLAIN or SCRAM login module)
``ssl.ca.location`` (PEM file)      ``ssl.truststore.location`` + ``ssl.truststore.type=PEM``
``ssl.endpoint.identification.algorithm=none``  the same option, empty
==================================  ==================================================================

A ``sasl.jaas.config`` works the other way round: librdkafka gets its username and password.
Options only one client knows go under ``java.`` (Java only) or ``librdkafka.`` (librdkafka
only). ``isolation.level`` is not an option: tidemark always reads ``read_committed``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from spark_jobs.errors import ConfigError

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_JAAS_VALUE = r'{}\s*=\s*"((?:[^"\\]|\\.)*)"'


def _check(options: Mapping[str, str]) -> None:
    for key, value in options.items():
        if key.removeprefix("java.").removeprefix("librdkafka.") == "isolation.level" and value != "read_committed":
            raise ConfigError(
                f"Kafka option {key}={value!r}: tidemark always reads read_committed (records of aborted "
                "transactions must never reach a sink); remove the option"
            )


def _mechanism(options: Mapping[str, str]) -> str | None:
    value = options.get("sasl.mechanism") or options.get("sasl.mechanisms")
    return value.strip().upper() if value else None


def _jaas_value(jaas: str, name: str) -> str | None:
    found = re.search(_JAAS_VALUE.format(name), jaas)
    return None if found is None else re.sub(r"\\(.)", r"\1", found.group(1))


def _quoted(value: str) -> str:
    """``value`` inside a JAAS string literal."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def librdkafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options for confluent-kafka's clients."""
    _check(options)
    mapped: dict[str, str] = {}
    for key, value in options.items():
        if key.startswith("java.") or key == "isolation.level":
            continue
        if key.startswith("librdkafka."):
            mapped[key.removeprefix("librdkafka.")] = value
        elif key == "sasl.jaas.config":
            for name in ("username", "password"):
                found = _jaas_value(value, name)
                if found is not None:
                    mapped.setdefault(f"sasl.{name}", found)
        else:
            mapped[key] = value
    return mapped


def java_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options for Spark's Kafka source (without the ``kafka.`` prefix), ``read_committed`` forced."""
    _check(options)
    mapped: dict[str, str] = {}
    for key, value in options.items():
        if key.startswith("librdkafka.") or key in ("sasl.username", "sasl.password", "isolation.level"):
            continue
        if key.startswith("java."):
            mapped[key.removeprefix("java.")] = value
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            mapped["sasl.mechanism"] = value.strip().upper()
        elif key == "ssl.ca.location":
            mapped["ssl.truststore.location"] = value
            mapped["ssl.truststore.type"] = "PEM"
        elif key == "ssl.endpoint.identification.algorithm":
            mapped[key] = "" if value.strip().lower() == "none" else value
        else:
            mapped[key] = value
    if "sasl.username" in options and "sasl.jaas.config" not in mapped:
        mechanism = _mechanism(options) or "PLAIN"  # librdkafka's default mechanism
        module = LOGIN_MODULES.get(mechanism)
        if module is None:
            raise ConfigError(
                f"Kafka SASL mechanism {mechanism!r} with sasl.username: tidemark builds the Java client's "
                f"login for {', '.join(LOGIN_MODULES)}; for another, give java.sasl.jaas.config as well"
            )
        username, password = (_quoted(options.get(k, "")) for k in ("sasl.username", "sasl.password"))
        mapped["sasl.jaas.config"] = f'{module} required username="{username}" password="{password}";'
    mapped["isolation.level"] = "read_committed"
    return mapped
