"""Run arguments from Airflow: scheduled and manual runs, the backfill and readmit forms checked before Spark."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spark_jobs.offsets import PartitionRange
from spark_jobs.planning import offsets_argument
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
