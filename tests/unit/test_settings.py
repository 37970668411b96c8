from pathlib import Path

import pytest

from spark_jobs.settings import Settings


def test_defaults_derive_from_home_and_ports(tmp_path: Path) -> None:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_KAFKA_PORT": "9999"})
    assert settings.bootstrap_servers == "127.0.0.1:9999"
    assert settings.postgres_dsn == "host=127.0.0.1 port=15432 dbname=tidemark user=tidemark"
    assert settings.lake_root == str(tmp_path / "lake")
    assert settings.table_path("events") == f"{tmp_path}/lake/events"
    assert settings.jars_dir == tmp_path / "jars"


def test_explicit_values_win_over_derived_ones(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "TIDEMARK_HOME": str(tmp_path),
            "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092",
            "TIDEMARK_LAKE_ROOT": "s3a://bucket/lake/",
            "TIDEMARK_POSTGRES_DSN": "host=db dbname=x",
        }
    )
    assert settings.bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert settings.table_path("sessions") == "s3a://bucket/lake/sessions"
    assert settings.postgres_dsn == "host=db dbname=x"


def test_kafka_options_pass_through_to_clients(tmp_path: Path) -> None:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL"})
    assert settings.kafka_client_config(**{"group.id": "g"}) == {
        "bootstrap.servers": "127.0.0.1:19092",
        "security.protocol": "SASL_SSL",
        "group.id": "g",
    }


@pytest.mark.parametrize("value", ["abc", "0", "70000"])
def test_bad_port_names_the_variable(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match="TIDEMARK_POSTGRES_PORT"):
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_POSTGRES_PORT": value})


def test_kafka_cluster_ids_never_start_with_a_dash() -> None:
    from spark_jobs.embedded.kafka_broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]  # about 31 of 2000 raw UUIDs would start with '-'
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)
