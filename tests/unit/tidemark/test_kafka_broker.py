"""The embedded broker's start-up verdicts (tidemark/embedded/kafka_broker.py), on a real exited process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from spark_jobs.settings import Settings
from tidemark.embedded.kafka_broker import KafkaBroker
from tidemark.embedded.process import ServiceError

BIND_FAILURE = (
    "[2026-12-07 13:00:00,000] ERROR [KafkaServer id=1] Fatal error during KafkaServer startup. "
    "org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:48167: "
    "Address already in use.\n"
)


def verdict_of_an_exited_broker(tmp_path: Path, log: str) -> tuple[KafkaBroker, str]:
    """The broker of a home whose Kafka log holds ``log`` and whose pid file names a process that has exited
    (a real one, run and waited for), and what waiting for it to answer raises."""
    broker = KafkaBroker(Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_KAFKA_PORT": "48167"}))
    broker.log_file.parent.mkdir(parents=True, exist_ok=True)
    broker.log_file.write_text(log)
    broker.pid_file.parent.mkdir(parents=True, exist_ok=True)
    exited = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    broker.pid_file.write_text(exited.stdout)
    with pytest.raises(ServiceError) as failed:
        broker._wait_ready(timeout=5, logged=0)
    return broker, str(failed.value)


def test_a_broker_that_exited_after_logging_why_is_named_by_that_cause(tmp_path: Path) -> None:
    # Kafka logs the failed bind, then exits: whichever the poll sees first, the user reads one verdict.
    broker, message = verdict_of_an_exited_broker(tmp_path, BIND_FAILURE)
    assert message.startswith("Kafka failed during start-up: "), message
    assert "Socket server failed to bind to 127.0.0.1:48167: Address already in use." in message, message
    assert str(broker.log_file) in message, message


def test_a_broker_that_exited_without_a_cause_in_its_log_says_so_with_the_logs_tail(tmp_path: Path) -> None:
    _, message = verdict_of_an_exited_broker(
        tmp_path, "[2026-12-07 13:00:00,000] INFO starting (kafka.server.KafkaRaftServer)\n"
    )
    assert message.startswith("Kafka exited during start-up."), message
    assert "INFO starting" in message, message
