"""A secured Kafka cluster: every client authenticates with one set of options (librdkafka's names).

A broker of its own with a SASL_PLAINTEXT listener and SCRAM-SHA-256 (the password is made up at
run time): the producer, the scheduled ingest (Spark's Java client), a backfill plan, and
reconcile's counting (librdkafka) all authenticate; a wrong password fails at once, in one line
that says which settings to fix.
"""

from __future__ import annotations

import secrets
import shutil
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs import ingest, reconcile
from spark_jobs.errors import ServiceUnavailable
from spark_jobs.planning import plan_backfill
from spark_jobs.settings import Settings
from tests.ports import free_port
from tidemark.embedded import KafkaBroker
from tidemark.producer import ProduceSpec, produce

# The distributed shape: `make test-deploy`, not `make test`.
pytestmark = pytest.mark.deploy


@pytest.fixture(scope="module")
def secured_broker(stack: Settings):
    """(SASL port, user, password) of a broker started for this module."""
    password = secrets.token_urlsafe(16)
    home = stack.home / "secured-kafka" / uuid.uuid4().hex[:8]
    plain = free_port()
    settings = replace(
        stack, home=home, kafka_port=plain, kafka_controller_port=free_port(), bootstrap_servers=f"127.0.0.1:{plain}"
    )
    broker = KafkaBroker(settings, sasl_port=free_port(), scram_users=(("tidemark", password),))
    broker.start()
    try:
        yield broker.sasl_port, "tidemark", password
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


def scram(settings: Settings, port: int, user: str, password: str) -> Settings:
    options = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    }
    return replace(settings, bootstrap_servers=f"127.0.0.1:{port}", kafka_options=options)


def test_every_client_authenticates_with_scram_and_a_wrong_password_fails_in_one_line(
    spark, fresh, secured_broker
) -> None:
    port, user, password = secured_broker
    settings = scram(fresh, port, user, password)
    started = datetime.now(UTC)
    report = produce(settings, ProduceSpec(count=300, entities=6, seed=8, id_prefix="sasl-"), topic=settings.topic)

    results = ingest.run_scheduled(spark, settings)  # Spark's Java client
    assert sum(r.read for r in results) == report.committed == 300
    plan = plan_backfill(settings, settings.topic, from_time=started - timedelta(minutes=5), to_time=datetime.now(UTC))
    assert sum(r.size for r in plan.ranges) == 300
    checked = reconcile.run(settings, "secured", lambda: spark)  # counts with librdkafka
    assert checked is not None and checked.ok and checked.checks, checked.summary()

    wrong = scram(fresh, port, user, "not-the-password")
    with pytest.raises(ServiceUnavailable) as failure:
        ingest.check_services(wrong, settings.topic)  # what every command runs before Spark starts
    message = str(failure.value)
    assert "\n" not in message and "not-the-password" not in message
    assert "refused tidemark's credentials" in message and "tidemark_kafka" in message, message
