"""Redaction: known secret values and secret-shaped text never reach a person."""

from __future__ import annotations

from spark_jobs.secrets import dsn_password, option_secrets, redact
from spark_jobs.settings import Settings

CANARY = "canary-Pw-5f3a9e"


def test_known_secret_values_are_masked_wherever_they_appear() -> None:
    text = f"could not log in with {CANARY} (user tidemark)"
    assert redact(text, [CANARY]) == "could not log in with *** (user tidemark)"


def test_secret_shaped_text_is_masked_without_knowing_the_value() -> None:
    masked = redact("host=db port=5432 user=t password=s3cr3t dbname=x")
    assert masked == "host=db port=5432 user=t password=*** dbname=x"
    assert redact("host=db password='a b\\'c' dbname=x") == "host=db password=*** dbname=x"
    assert redact("postgresql://tidemark:s3cr3t@db:5432/tidemark") == "postgresql://tidemark:***@db:5432/tidemark"
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="s3cr3t";'
    assert "s3cr3t" not in redact(jaas)
    assert redact('{"sasl.password": "s3cr3t", "bootstrap.servers": "k:9092"}') == (
        '{"sasl.password": ***, "bootstrap.servers": "k:9092"}'
    )


def test_settings_know_their_secrets() -> None:
    settings = Settings.from_env(
        {
            "TIDEMARK_POSTGRES_DSN": f"host=db dbname=tidemark user=tidemark password={CANARY}",
            "TIDEMARK_KAFKA_OPT_SASL_PASSWORD": "kafka-secret",
            "TIDEMARK_KAFKA_OPT_SASL_JAAS_CONFIG": 'ScramLoginModule required username="u" password="jaas-secret";',
            "TIDEMARK_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        }
    )
    secrets = settings.secrets()
    assert CANARY in secrets and "kafka-secret" in secrets and "jaas-secret" in secrets
    assert "SASL_PLAINTEXT" not in secrets
    assert dsn_password("host=db user=x") is None
    assert option_secrets({"bootstrap.servers": "k:9092"}) == []
