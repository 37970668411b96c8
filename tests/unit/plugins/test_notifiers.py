"""Alerts: the webhook's URL, the message, masked secrets, and when a run alerts."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

import pytest

from tidemark_airflow.notifiers import AlertNotifier, webhook_url

if TYPE_CHECKING:
    from airflow.sdk import Context


def test_webhook_url_from_a_full_url_or_from_parts() -> None:
    assert (
        webhook_url("https://hooks.slack.com/services/T/B/X", None, None, {})
        == "https://hooks.slack.com/services/T/B/X"
    )
    assert webhook_url("alerts.internal", "http", 8080, {"endpoint": "/hook"}) == "http://alerts.internal:8080/hook"
    assert webhook_url(None, None, None, {"url": "https://x/y"}) == "https://x/y"
    with pytest.raises(ValueError, match="needs the webhook URL"):
        webhook_url(None, None, None, {})


def test_alert_message_names_the_task_run_and_error() -> None:
    class TI:
        dag_id, task_id, run_id = "tidemark_reconcile", "compare", "manual__1"

    # A task instance of the three fields the message reads, in a context of those it reads.
    context = cast("Context", {"ti": TI(), "run_id": "manual__1", "exception": RuntimeError("partition 3 off")})
    text = AlertNotifier.message(context)
    assert text.splitlines()[0] == "tidemark alert: tidemark_reconcile.compare failed in run manual__1"
    assert "partition 3 off" in text


def test_the_alert_masks_the_connections_secrets_and_anything_shaped_like_a_secret(monkeypatch) -> None:
    canary = "canary-Pw-5f3a9e"
    postgres = {"conn_type": "postgres", "host": "db", "schema": "tidemark", "login": "t", "password": canary}
    kafka = {"conn_type": "generic", "extra": {"bootstrap.servers": "k:9092", "sasl.password": "kafka-canary"}}
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_POSTGRES", json.dumps(postgres))
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_KAFKA", json.dumps(kafka))
    failure = RuntimeError(f"login with {canary} failed; kafka said kafka-canary; dsn host=x password=other-one")
    text = AlertNotifier.message({"exception": failure, "run_id": "r1"})
    assert text.endswith("login with *** failed; kafka said ***; dsn host=x password=***")


def test_a_run_alerts_on_broken_producer_requirements_only_above_the_threshold() -> None:
    from tidemark_airflow.operators import producer_alert

    extra = {
        "topic": "events",
        "producer": {"entities_in_many_partitions": 2, "not_log_append_time": 0, "time_went_back": 1},
    }
    text = producer_alert(extra, threshold=0)
    assert text is not None and text.startswith("the producers of topic events broke tidemark's requirements")
    assert "2 entities in many partitions, 1 time went back" in text and "not log append time" not in text
    assert "murmur2" in text and "LogAppendTime" in text
    assert producer_alert(extra, threshold=3) is None
    assert producer_alert(extra | {"producer": dict.fromkeys(extra["producer"], 0)}, threshold=0) is None
