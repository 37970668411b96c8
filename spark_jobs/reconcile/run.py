"""One reconcile run: the snapshot, what to check, with or without Spark, and its record.

See :mod:`spark_jobs.reconcile` for the steps; this module puts them in order.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, overload

from spark_jobs import db
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.errors import ConfigError
from spark_jobs.offsets import PartitionRange, check_reachable
from spark_jobs.reconcile.ranges import (
    compare_ranges,
    range_counts,
    ranges_holding,
    reason_to_check,
    rotation_share,
)
from spark_jobs.reconcile.sessions import (
    anchors_to_recompute,
    sessions_buckets,
    sessions_differing_from_events,
    sessions_differing_from_postgres,
)
from spark_jobs.reconcile.snapshot import Snapshot, read_snapshot, snapshot_time
from spark_jobs.settings import Settings
from spark_jobs.sinks.delta_log import local_versions, spark_versions, touched_since
from spark_jobs.spark import FrozenFrames
from spark_jobs.store import history, ledger, open_findings, stored_rules
from spark_jobs.store.findings import (
    CHANGED,
    MOVED,
    NEW,
    RANGE,
    ROTATION,
    Gap,
    LedgerEntry,
    SessionDifference,
    SessionsSummary,
    find_gaps,
    range_key,
)
from spark_jobs.store.lag import measure_lag
from spark_jobs.store.lock import lake_snapshot, one_reconcile
from spark_jobs.store.open_findings import OpenFinding, entities_to_recheck, follow_up
from spark_jobs.store.report import Report
from spark_jobs.store.retention import Loss, recorded_losses
from spark_jobs.store.verified import LedgerRange, key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@overload
def run(
    settings: Settings,
    run_id: str,
    spark_factory: Callable[[], SparkSession],
    repair_of: str | None = None,
    wait: bool = False,
) -> Report: ...


@overload
def run(
    settings: Settings,
    run_id: str,
    spark_factory: None,
    repair_of: str | None = None,
    wait: bool = False,
) -> Report | None: ...


def run(
    settings: Settings,
    run_id: str,
    spark_factory: Callable[[], SparkSession] | None,
    repair_of: str | None = None,
    wait: bool = False,
) -> Report | None:
    """Reconcile once and record the outcome under ``run_id``.

    With ``spark_factory`` None (the Airflow task that runs before Spark), returns None when the
    run needs Spark, having recorded nothing: the Spark job then runs it in full. One run at a
    time: with ``wait`` it queues behind a run in progress, else it fails at once (``ReconcileBusy``).
    """
    if not run_id:
        raise ValueError("a reconcile run needs a run id (Airflow passes its run_id)")
    with one_reconcile(settings, run_id, wait):
        return _run(settings, run_id, spark_factory, repair_of)


def _run(
    settings: Settings, run_id: str, spark_factory: Callable[[], SparkSession] | None, repair_of: str | None
) -> Report | None:
    with db.transaction(settings.pipeline_dsn) as cur:
        topics = ledger.topics(cur)
    check_reachable(settings)
    for topic in topics:  # a topic deleted and created again fails here, before any work
        ledger.verify_topic(settings, topic)
    # One REPEATABLE READ transaction from the lake lock to the record: every read sees the snapshot.
    with db.transaction(settings.pipeline_dsn, isolation_level="REPEATABLE READ") as cur:
        spark = None
        if local_versions(settings) is None:  # a remote lake: only Spark reads its log
            if spark_factory is None:
                return None
            spark = spark_factory()
        with lake_snapshot(settings):
            held_from = time.perf_counter()
            versions = spark_versions(spark, settings) if spark is not None else local_versions(settings)
            assert versions is not None  # None for a remote lake only, whose log Spark read
            now = snapshot_time(cur)  # the PostgreSQL snapshot is fixed at the first query
        held = time.perf_counter() - held_from
        snapshot = read_snapshot(cur, versions, now)
        snapshot.to_check = _due(snapshot, settings)
        lags = measure_lag(settings, snapshot.ranges, now)
        buckets = snapshot.previous_buckets  # Delta sessions per entity bucket, as of this run
        previous_sessions = snapshot.previous_delta_sessions
        if not snapshot.to_check and previous_sessions is not None and _nothing_changed(snapshot):
            report = Report(run_id, [], [], previous_sessions, snapshot.postgres_sessions, used_spark=False)
        else:
            if spark is None:
                if spark_factory is None:
                    cur.connection.rollback()
                    return None
                spark = spark_factory()
            with FrozenFrames(spark) as frozen:
                report, buckets = _check_with_spark(spark, settings, cur, snapshot, run_id, frozen)
        gaps, losses = _ledger_findings(cur, snapshot.ranges)
        report = replace(
            report,
            gaps=gaps,
            losses=losses,
            lags=lags,
            lag_alert_seconds=settings.lag_alert_minutes * 60,
            snapshot_seconds=held,
        )
        follow = follow_up(snapshot.open_findings, report, repair_of)
        report = replace(
            report,
            carried=[f.carried(finding) for f, finding in follow.carried],
            closed=[f"{f.describe()}: {why}" for f, why in follow.closed],
            opened=len(follow.opened),
        )
        committed = {(r.pipeline, r.batch_id) for r in snapshot.ranges}
        checked = history.RunChecked(snapshot.now, snapshot.versions, buckets, snapshot.verified, committed)
        history.record_run(cur, report, checked, repair_of, follow)
        return report


def acknowledge(settings: Settings, finding_ids: list[int], who: str, reason: str) -> list[OpenFinding]:
    """Close open findings as acknowledged by ``who`` (an operator's decision, with its ``reason``):
    what no repair can fix, such as a range retention removed. Between reconcile runs, not during one."""
    if not reason.strip():
        raise ConfigError("say why the findings are acknowledged: --reason TEXT (it is kept with them)")
    holder = f"acknowledging {', '.join(f'#{i}' for i in finding_ids)}"
    with one_reconcile(settings, holder, wait=True), db.transaction(settings.pipeline_dsn) as cur:
        return open_findings.acknowledge(cur, finding_ids, who, reason.strip())


def _due(snapshot: Snapshot, settings: Settings) -> list[tuple[LedgerRange, str]]:
    """The ranges to check before the Delta log is read: never verified, and the rotation's share."""
    ranges, verified = snapshot.ranges, snapshot.verified
    due = [(r, reason) for r in ranges if (reason := reason_to_check(r, verified, ROTATION)) in (NEW, MOVED)]
    due += [(r, ROTATION) for r in rotation_share(ranges, verified, snapshot.previous_at, snapshot.now, settings)]
    return due


def _nothing_changed(s: Snapshot) -> bool:
    return (
        s.previous_versions is not None
        and s.previous_versions == s.versions
        and s.previous_delta_sessions == s.postgres_sessions
    )


def _ledger_findings(cur, ranges: list[LedgerRange]) -> tuple[list[Gap], list[Loss]]:
    """What the ledger alone shows (its ``ranges`` as of the run's snapshot): gaps between scheduled
    batches, and acknowledged retention losses."""
    losses = recorded_losses(cur)
    entries = (LedgerEntry(r.pipeline, r.batch_id, r.range.topic, r.range.partition, r.range.start, r.range.end)
               for r in ranges)  # fmt: skip
    return find_gaps(entries, losses), losses


# ---------------------------------------------------------------------------------------------
# The Spark part


def _at(spark: SparkSession, settings: Settings, name: str, version: int) -> DataFrame:
    """Table ``name`` as of ``version`` (the run's snapshot); an empty frame before the table exists."""
    if version < 0:
        return spark.createDataFrame([], TABLE_SCHEMAS[name])
    return spark.read.format("delta").option("versionAsOf", version).load(settings.table_path(name))


def _check_with_spark(
    spark: SparkSession,
    settings: Settings,
    cur,
    snapshot: Snapshot,
    run_id: str,
    frozen: FrozenFrames,
) -> tuple[Report, dict[str, tuple[int, int]]]:
    """The full check at the snapshot's versions; the report and Delta sessions' buckets."""
    versions = snapshot.versions
    tables = {name: _at(spark, settings, name, versions[name]) for name in TABLE_SCHEMAS}
    touched = touched_since(spark, settings, snapshot.previous_versions, versions, frozen)
    to_check = list(snapshot.to_check)
    listed = {key(r) for r, _ in to_check}
    for f in snapshot.open_findings:  # every run with Spark checks the ranges of open findings again
        if f.kind == RANGE and range_key(f.finding) not in listed:
            r = LedgerRange(f.finding["pipeline"], f.finding["batch_id"], PartitionRange(
                f.finding["topic"], f.finding["partition"], f.finding["start"], f.finding["end"]))  # fmt: skip
            to_check.append((r, reason_to_check(r, snapshot.verified, CHANGED)))
            listed.add(key(r))
    if touched.coordinates is not None:
        changed = ranges_holding(spark, touched.coordinates, [r for r in snapshot.ranges if key(r) not in listed])
        to_check += [(r, CHANGED) for r in changed]
    elif snapshot.previous_versions is not None and snapshot.previous_versions != versions:
        to_check += [(r, CHANGED) for r in snapshot.ranges if key(r) not in listed]  # the log is gone: all
    counts = range_counts(spark, tables, [r for r, _ in to_check])
    checks = compare_ranges(settings, to_check, counts, snapshot.verified)

    buckets = sessions_buckets(tables["sessions"], snapshot.previous_buckets, touched)
    delta_sessions = SessionsSummary(sum(n for n, _ in buckets.values()), sum(c for _, c in buckets.values()))
    differences = []
    if delta_sessions != snapshot.postgres_sessions:
        pairs = sessions_differing_from_postgres(tables["sessions"], buckets, cur)
        differences.append(SessionDifference.of("sinks", pairs))
    recorded = stored_rules.recorded_session_rules(cur)
    rules = recorded.rules if recorded else settings.session_rules
    checked = 0
    if rules is not None:  # else the pipeline cuts no sessions: both sinks must hold none, as compared above
        reopened = entities_to_recheck(snapshot.open_findings)
        anchored = frozen.freeze(anchors_to_recompute(tables, [r.range for r, _ in to_check], touched, rules, reopened))
        checked = anchored.count()
        if checked:
            pairs = sessions_differing_from_events(tables["events"], tables["sessions"], anchored, rules, frozen)
            if pairs:
                differences.append(SessionDifference.of("events", pairs))
    report = Report(run_id, checks, [], delta_sessions, snapshot.postgres_sessions, differences, checked)
    return report, buckets


# ---------------------------------------------------------------------------------------------
# Entry points


def new_run_id(prefix: str = "cli") -> str:
    return f"{prefix}__{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session
    from spark_jobs.store.ledger import stored_records

    parser = argparse.ArgumentParser(description="tidemark reconciliation")
    parser.add_argument("--run-id", required=True, help="the reconcile run (Airflow's run_id)")
    parser.add_argument("--repair-of", help="the run a repair re-checks")
    parser.add_argument("--wait", action="store_true", help="queue behind a reconcile run in progress")
    args = parser.parse_args(argv)
    settings = Settings.from_env().for_run()  # its pipeline and topic, before any work
    spark = lambda: build_session(settings, "tidemark-reconcile", stored_records(settings))  # noqa: E731
    report = run(settings, args.run_id, spark, args.repair_of, args.wait)
    # The run is recorded; a finding is the verdict task's to report (and alert on), not a job failure.
    print(report.summary())
