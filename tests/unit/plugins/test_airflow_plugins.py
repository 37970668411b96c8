"""Pure logic of the Airflow side: run arguments, connection mapping, alerts."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from spark_jobs.offsets import PartitionRange
from spark_jobs.planning import offsets_argument
from spark_jobs.settings import Settings
from tidemark_airflow.connections import kafka_env, postgres_dsn
from tidemark_airflow.notifiers import AlertNotifier, webhook_url
from tidemark_airflow.runs import BackfillRequest, ingest_arguments


def test_scheduled_and_manual_runs_ingest_what_is_new() -> None:
    assert ingest_arguments("scheduled", None, None, "events") == ["scheduled", "--topic", "events", "--wait"]
    assert ingest_arguments("manual", None, None, "t")[0] == "scheduled"
    split = ingest_arguments("manual", None, None, "t", split_frozen_batch=True)
    assert split == ["scheduled", "--topic", "t", "--wait", "--split-frozen-batch"]
    acknowledged = ingest_arguments("manual", None, None, "t", allow_data_loss=True)
    assert acknowledged == ["scheduled", "--topic", "t", "--wait", "--allow-data-loss"]


def test_a_backfill_run_rereads_its_data_interval_by_arrival_time() -> None:
    start, end = datetime(2026, 3, 1, 10, tzinfo=UTC), datetime(2026, 3, 1, 10, 15, tzinfo=UTC)
    args = ingest_arguments("backfill", start, end, "events")
    assert args == [
        "backfill", "--topic", "events", "--wait",
        "--from-time", "2026-03-01T10:00:00+00:00", "--to-time", "2026-03-01T10:15:00+00:00",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="data interval"):
        ingest_arguments("backfill", end, end, "events")
    subset = ingest_arguments("backfill", start, end, "events", partitions=" 0,2 ")
    assert subset[-2:] == ["--partitions", "0,2"]
    assert ingest_arguments("scheduled", None, None, "events", partitions="1") == ingest_arguments(
        "scheduled", None, None, "events"
    ), "scheduled runs read what is new on every partition"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"topic": "", "offsets": "0:0-1"}, "topic is empty"),
        ({"topic": "e", "offsets": "0:0-1", "from_time": "2026-01-01T00:00:00+00:00"}, "not both"),
        ({"topic": "e"}, "give a time range"),
        ({"topic": "e", "from_time": "2026-01-01T00:00:00+00:00"}, "give a time range"),
        ({"topic": "e", "from_time": "yesterday", "to_time": "2026-01-01T00:00:00+00:00"}, "not an ISO-8601"),
        ({"topic": "e", "from_time": "2026-01-01T00:00:00", "to_time": "2026-01-02T00:00:00+00:00"}, "no UTC offset"),
        ({"topic": "e", "offsets": "zero:0-5"}, r"bad offset range 'zero:0-5': write PARTITION:START-END"),
        ({"topic": "e", "offsets": "0:9-5"}, "end"),
    ],
)
def test_the_backfill_form_is_checked_with_a_message_that_says_what_to_fix(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackfillRequest.from_params(params)


def test_a_bad_form_is_the_first_line_the_plan_task_logs_and_fails_without_a_retry() -> None:
    import logging

    from tidemark_airflow.notifiers import BadRequest
    from tidemark_airflow.runs import resolve_backfill

    class Lines(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    log, lines = logging.getLogger("test.plan"), Lines()
    log.addHandler(lines)
    with pytest.raises(BadRequest) as refused:
        resolve_backfill({"topic": "events", "offsets": "0-5"}, log)
    assert lines.lines[0] == str(refused.value) and "\n" not in lines.lines[0]
    assert lines.lines[0].startswith("invalid backfill parameters: bad offset range '0-5': write PARTITION:START-END")


def test_a_valid_backfill_form_becomes_arguments_for_exactly_the_resolved_plan() -> None:
    request = BackfillRequest.from_params(
        {"topic": "events", "from_time": "2026-01-01T00:00:00Z", "to_time": "2026-01-02T00:00:00Z", "dry_run": True}
    )
    assert request.dry_run and request.from_time == datetime(2026, 1, 1, tzinfo=UTC)
    offsets = offsets_argument([PartitionRange("events", 0, 5, 9), PartitionRange("events", 1, 0, 3)])
    assert request.arguments(offsets) == ["backfill", "--topic", "events", "--offsets", "0:5-9,1:0-3", "--wait"]
    acknowledged = BackfillRequest.from_params({"topic": "events", "offsets": "0:0-9", "allow_data_loss": True})
    assert acknowledged.arguments("0:0-9")[-1] == "--allow-data-loss", "the job skips and records what is gone"


def test_the_readmit_form_is_checked_before_spark_and_becomes_the_jobs_arguments() -> None:
    """What the readmit job reads back (its own parser): the selection and the dry run; bad forms fail first."""
    import argparse
    import logging

    from spark_jobs import readmit
    from tidemark_airflow.notifiers import BadRequest
    from tidemark_airflow.runs import readmit_arguments

    log = logging.getLogger("test.readmit")
    form = {"reason": "schema: enum at /event", "from_time": "2026-01-01T00:00:00Z", "to_time": "2026-01-02T00:00:00Z"}
    arguments = readmit_arguments({**form, "dry_run": True}, "manual__1", log, "web")
    parser = argparse.ArgumentParser()
    readmit.add_arguments(parser)
    parser.add_argument("--readmit-id")
    args = parser.parse_args(arguments)
    assert args.readmit_id == "manual__1" and args.dry_run
    assert readmit.selection_from(args) == readmit.Selection(
        "schema: enum at /event", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    )
    assert readmit_arguments({}, "manual__2", log) == ["--readmit-id", "manual__2"]  # every quarantined record
    with pytest.raises(BadRequest, match="invalid readmit parameters: give both --from-time and --to-time"):
        readmit_arguments({"from_time": "2026-01-01T00:00:00Z"}, "manual__3", log)
    with pytest.raises(BadRequest, match="bad offset range '0-5'"):
        readmit_arguments({"offsets": "0-5"}, "manual__4", log)


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

    text = AlertNotifier.message({"ti": TI(), "run_id": "manual__1", "exception": RuntimeError("partition 3 off")})
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


def test_spark_submit_runs_a_module_job_itself_and_a_package_job_through_its_main() -> None:
    from pathlib import Path

    from tidemark_airflow.operators import JOBS, job_application

    assert Path(job_application("ingest")).parts[-2:] == ("spark_jobs", "ingest.py")
    assert Path(job_application("reconcile")).parts[-3:] == ("spark_jobs", "reconcile", "__main__.py")
    assert all(Path(job_application(job)).is_file() for job in JOBS)
