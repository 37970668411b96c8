"""What a DAG run asks the ingest job to do, decided (and checked) before Spark starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tidemark_airflow.notifiers import BadRequest

BACKFILL_RUN_TYPE = "backfill"  # DagRunType.BACKFILL_JOB: a run created by Airflow's own Backfill


def ingest_arguments(
    run_type: object,
    interval_start: datetime | None,
    interval_end: datetime | None,
    topic: str,
    partitions: str | None = None,
    allow_data_loss: bool = False,
    split_frozen_batch: bool = False,
) -> list[str]:
    """Arguments of ``spark_jobs/ingest.py`` for a ``tidemark_ingest`` run.

    A scheduled or manual run processes whatever arrived since the last one (the streaming
    checkpoint knows where that is). A run that Airflow's Backfill created re-reads its own data
    interval's arrival-time range as one bounded batch, of every partition or of ``partitions``
    (``"0,2"``, the backfill's run conf); that is idempotent, so backfilling an interval that was
    already processed changes nothing. ``allow_data_loss`` acknowledges offsets Kafka's retention
    removed: a scheduled run records them as lost, a backfill processes what is left. A scheduled
    batch's size cap comes from the job's settings (``TIDEMARK_MAX_OFFSETS_PER_TRIGGER``);
    ``split_frozen_batch`` has a scheduled run plan a frozen batch too big to finish again within it.
    """
    kind = getattr(run_type, "value", run_type)
    common = ["--topic", topic, "--wait", *(["--allow-data-loss"] if allow_data_loss else [])]
    if kind != BACKFILL_RUN_TYPE:
        return ["scheduled", *common, *(["--split-frozen-batch"] if split_frozen_batch else [])]
    if interval_start is None or interval_end is None or interval_end <= interval_start:
        raise ValueError(
            f"a backfill run needs a data interval with its end after its start, got [{interval_start}, "
            f"{interval_end}); the DAG's timetable must give data intervals"
        )
    subset = ["--partitions", partitions.strip()] if partitions and partitions.strip() else []
    window = ["--from-time", interval_start.isoformat(), "--to-time", interval_end.isoformat()]
    return ["backfill", *common, *window, *subset]


@dataclass(frozen=True)
class BackfillRequest:
    """The ``tidemark_backfill`` trigger form, parsed."""

    topic: str
    from_time: datetime | None
    to_time: datetime | None
    offsets: str | None
    dry_run: bool
    allow_data_loss: bool = False  # skip (and record as lost) offsets retention removed

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> BackfillRequest:
        topic = str(params.get("topic") or "").strip()
        if not topic:
            raise ValueError("topic is empty: name the Kafka topic to backfill")
        offsets = str(params.get("offsets") or "").strip() or None
        from_time = _timestamp(params.get("from_time"), "from_time")
        to_time = _timestamp(params.get("to_time"), "to_time")
        if offsets and (from_time or to_time):
            raise ValueError("give either offsets or from_time/to_time, not both")
        if not offsets and not (from_time and to_time):
            raise ValueError(
                "give a time range (both from_time and to_time) or offsets like 0:100-200,1:0-50 (end exclusive)"
            )
        if offsets:
            from spark_jobs.planning import parse_offsets

            parse_offsets(offsets)  # one line that says how to write them (ConfigError is a ValueError)
        return cls(topic, from_time, to_time, offsets, bool(params.get("dry_run")), bool(params.get("allow_data_loss")))

    def arguments(self, plan_offsets: str) -> list[str]:
        """``spark_jobs/ingest.py`` arguments for the *resolved* plan: exactly the offsets printed
        (with ``allow_data_loss``, the ranges asked for: the job skips and records what is gone)."""
        loss = ["--allow-data-loss"] if self.allow_data_loss else []
        return ["backfill", "--topic", self.topic, "--offsets", plan_offsets, "--wait", *loss]


def bad_request(message: str, log) -> BadRequest:  # a logger
    """A form to fix: its one line goes first into the task's log (before the traceback Airflow adds)."""
    log.error("%s", message)
    return BadRequest(message)


def _timestamp(value: object, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            raise ValueError(f"{name}={value!r} is not an ISO-8601 timestamp, e.g. 2026-01-01T00:00:00+00:00") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{name}={value!r} has no UTC offset; add one, e.g. 2026-01-01T00:00:00+00:00")
    return parsed


def resolve_backfill(params: Mapping[str, object], log, pipeline: str | None = None) -> list[str] | None:  # a logger
    """Check ``pipeline``'s trigger form and resolve it against the broker; log the plan with record counts.

    Returns the ingest job's arguments for exactly the plan logged, or None when there is nothing to
    run: a dry run, or a plan processed before (a no-op, so the backfill task is skipped). Bad
    parameters raise BadRequest (no retry, no alert: the form must be fixed) with what to fix.
    """
    from spark_jobs.errors import TidemarkError
    from spark_jobs.planning import describe_plan, offsets_argument, parse_offsets, plan_backfill
    from tidemark_airflow.connections import tidemark_settings
    from tidemark_airflow.hooks import KafkaOffsetsHook

    try:
        request = BackfillRequest.from_params(params)
        settings = tidemark_settings(pipeline)
        offsets = parse_offsets(request.offsets) if request.offsets else None
        plan = plan_backfill(
            settings, request.topic, offsets, request.from_time, request.to_time, request.allow_data_loss
        )
    except (ValueError, TidemarkError) as exc:
        raise bad_request(f"invalid backfill parameters: {exc}", log) from None
    kafka = KafkaOffsetsHook()
    counts = {r.partition: kafka.count_committed(r.topic, r.partition, r.start, r.end) for r in plan.ranges}
    log.info("resolved backfill plan%s:\n%s", " (dry run: nothing will be written)" if request.dry_run else "",
             describe_plan(plan.ranges, counts))  # fmt: skip
    if plan.skipped:
        log.info("skipped, no longer on the broker (recorded as lost unless a record table holds them): %s",
                 ", ".join(map(str, plan.skipped)))  # fmt: skip
    if request.dry_run:
        return None
    done = processed_before(settings, plan)
    if done is not None:
        log.info(
            "nothing to do: exactly this plan was processed before (%s batch %s), and replaying it changes "
            "nothing. To repair sinks, use the tidemark_repair DAG with the reconcile run that named the problem.",
            *done,
        )
        return None
    return request.arguments(offsets_argument(plan.asked))


def processed_before(settings, plan) -> tuple[str, int] | None:  # Settings, BackfillPlan
    """(pipeline, batch_id) of an earlier backfill of exactly ``plan``, if any."""
    from spark_jobs import db
    from spark_jobs.ingest import recorded_plan
    from spark_jobs.store.ledger import BACKFILL, pipeline_name

    with db.transaction(settings.pipeline_dsn) as cur:
        batch_id = recorded_plan(cur, plan)
    return None if batch_id is None else (pipeline_name(BACKFILL, plan.topic), batch_id)


def readmit_arguments(params: Mapping[str, object], readmit_id: str, log, pipeline: str | None = None) -> list[str]:
    """Check ``pipeline``'s ``tidemark_readmit`` form (before Spark starts); the readmit job's arguments.

    Bad parameters are a BadRequest (no alert): the form must be fixed.
    """
    from spark_jobs.errors import TidemarkError
    from spark_jobs.planning import parse_offsets
    from spark_jobs.readmit import Selection

    reason = str(params.get("reason") or "").strip() or None
    offsets = str(params.get("offsets") or "").strip() or None
    try:
        selection = Selection(
            reason,
            _timestamp(params.get("from_time"), "from_time"),
            _timestamp(params.get("to_time"), "to_time"),
            parse_offsets(offsets) if offsets else {},
        )
    except (ValueError, TidemarkError) as exc:
        raise bad_request(f"invalid readmit parameters: {exc}", log) from None
    dry_run = bool(params.get("dry_run"))
    log.info("readmit%s: %s", " (dry run: nothing will be written)" if dry_run else "", selection.describe())
    arguments = ["--readmit-id", readmit_id]
    if reason:
        arguments += ["--reason", reason]
    if selection.from_time and selection.to_time:
        arguments += ["--from-time", selection.from_time.isoformat(), "--to-time", selection.to_time.isoformat()]
    if offsets:
        arguments += ["--offsets", offsets]
    return arguments + (["--dry-run"] if dry_run else [])


def refuse_unmatched_reason(params: Mapping[str, object], log, pipeline: str | None = None) -> None:
    """A form's reason that selects no record quarantined now in ``pipeline``: a BadRequest (no alert) naming the
    reasons there are, before Spark starts."""
    from spark_jobs import readmit
    from spark_jobs.errors import TidemarkError
    from tidemark_airflow.connections import tidemark_settings

    reason = str(params.get("reason") or "").strip() or None
    if reason is None:
        return
    try:
        readmit.refuse_unmatched_reason(tidemark_settings(pipeline), readmit.Selection(reason))
    except TidemarkError as exc:
        raise bad_request(str(exc), log) from None


def repair_arguments(params: Mapping[str, object], repair_id: str, log, pipeline: str | None = None) -> list[str]:
    """Check ``pipeline``'s ``tidemark_repair`` form and log the repair plan (to ``log``); the repair job's arguments.

    An unknown run, or one that found nothing, is a BadRequest (no alert): the form must be fixed.
    """
    from spark_jobs.errors import TidemarkError
    from spark_jobs.repair import load_plan
    from tidemark_airflow.connections import tidemark_settings

    run_id = str(params.get("reconcile_run_id") or "").strip() or None
    try:
        plan = load_plan(tidemark_settings(pipeline), run_id)
    except TidemarkError as exc:
        raise bad_request(f"cannot repair: {exc}", log) from None
    log.info("%s", "\n".join(plan.lines()))
    return ["--run-id", plan.run_id, "--repair-id", repair_id]
