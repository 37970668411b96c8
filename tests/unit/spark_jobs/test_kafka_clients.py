"""One set of Kafka options (librdkafka's names), mapped for librdkafka and for Spark's Java client."""

from __future__ import annotations

import pytest

from spark_jobs.errors import ConfigError
from spark_jobs.kafka_clients import java_options, librdkafka_options
from spark_jobs.settings import Settings

SCRAM = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanisms": "SCRAM-SHA-256",
    "sasl.username": "tidemark",
    "sasl.password": 'pa"ss\\word',
}


def test_sasl_with_username_and_password_authenticates_both_clients() -> None:
    assert librdkafka_options(SCRAM) == SCRAM
    java = java_options(SCRAM)
    assert java == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="tidemark" '
        'password="pa\\"ss\\\\word";',
        "isolation.level": "read_committed",
    }


def test_a_jaas_configuration_gives_librdkafka_its_username_and_password() -> None:
    options = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="p\\"w";',
    }
    assert librdkafka_options(options) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": 'p"w',
    }
    assert java_options(options)["sasl.jaas.config"] == options["sasl.jaas.config"]


def test_ssl_names_are_mapped_and_client_only_options_go_to_their_client() -> None:
    options = {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "java.ssl.protocol": "TLSv1.3",
        "librdkafka.socket.keepalive.enable": "true",
    }
    assert java_options(options) == {
        "security.protocol": "SSL",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "ssl.protocol": "TLSv1.3",
        "isolation.level": "read_committed",
    }
    assert librdkafka_options(options) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "socket.keepalive.enable": "true",
    }


@pytest.mark.parametrize("key", ["isolation.level", "java.isolation.level", "librdkafka.isolation.level"])
def test_read_uncommitted_is_refused_whoever_it_is_for(key: str) -> None:
    with pytest.raises(ConfigError, match="always reads read_committed"):
        java_options({key: "read_uncommitted"})
    with pytest.raises(ConfigError, match="always reads read_committed"):
        librdkafka_options({key: "read_uncommitted"})


def test_an_unknown_mechanism_with_a_username_asks_for_the_java_login() -> None:
    with pytest.raises(ConfigError, match="java.sasl.jaas.config"):
        java_options({"sasl.mechanism": "OAUTHBEARER", "sasl.username": "u", "sasl.password": "p"})
    given = {"sasl.mechanism": "OAUTHBEARER", "sasl.username": "u", "java.sasl.jaas.config": "x required;"}
    assert java_options(given)["sasl.jaas.config"] == "x required;"


def test_the_settings_hand_each_client_its_options() -> None:
    settings = Settings.from_env({f"TIDEMARK_KAFKA_OPT_{k.upper().replace('.', '_')}": v for k, v in SCRAM.items()})
    config = settings.kafka_client_config(**{"group.id": "g"})
    assert config["sasl.username"] == "tidemark" and config["group.id"] == "g"


def test_the_spark_source_reads_committed_records_in_split_tasks_without_waiting_at_the_end() -> None:
    from spark_jobs.kafka_source import FETCH_MAX_WAIT_MS, source_options

    options = source_options(Settings.from_env({"TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": "broker:9092"}))

    assert options == {
        "kafka.bootstrap.servers": "broker:9092",
        "maxRecordsPerPartition": "25000",
        "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
        "kafka.isolation.level": "read_committed",
    }


def test_the_users_fetch_wait_and_an_unsplit_read_are_kept() -> None:
    from spark_jobs.kafka_source import source_options

    env = {"TIDEMARK_KAFKA_OPT_JAVA_FETCH_MAX_WAIT_MS": "300", "TIDEMARK_READ_TASK_RECORDS": "0"}
    options = source_options(Settings.from_env(env))

    assert options["kafka.fetch.max.wait.ms"] == "300"
    assert "maxRecordsPerPartition" not in options
