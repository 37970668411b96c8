"""Repair what a reconcile run named, and only that, then re-check.

spark-submit entry point (the ``tidemark_repair`` DAG's Spark task)::

    spark-submit spark_jobs/repair.py [--run-id RECONCILE_RUN_ID]

``tidemark repair`` runs the same :func:`repair`. Holding the writer lock, it first checks each
range finding of the run (the latest mismatch when no run is given) again as the sinks are now: a
finding that no longer holds is left alone, and said so. Per finding that holds:

* **missing records, a gap:** the named offsets are read again from Kafka and processed as one
  batch of the ``repair:<topic>`` pipeline. Records a sink holds stay as they are; the others are
  validated and ranked as any batch would, and their entities' sessions recomputed. A range that
  lost nothing writes nothing, and still records its ledger range (which closes a gap).
* **extra or changed rows:** the range's rows are deleted from ``events``, ``duplicates`` and
  ``quarantine`` and the range is processed again, so each committed record is back exactly once.
  Only offsets Kafka still holds are deleted: a row is never removed unless it can be written
  again. Rows at offsets retention removed are kept as they are, and the repair says so. Before
  the clear, the range's quarantined records that the contract accepts now (a fix since) are
  readmitted, so the quarantine's counts stop holding them (:func:`readmit.readmit_holding`).
* **sessions that differ** (Delta vs PostgreSQL, or vs a recompute from ``events``): the named
  entities' sessions are recomputed from ``events`` and written to both sinks.
* **expired ranges:** nothing can be re-read; they are reported, not repaired.

Then a reconcile run re-checks everything (its ``repair_of`` names the run repaired); the repair's
outcome goes to the ``repairs`` table.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from spark_jobs import db, readmit, reconcile
from spark_jobs.contract import RECORD_TABLES
from spark_jobs.errors import ConfigError, run_job
from spark_jobs.kafka_source import read_range
from spark_jobs.offsets import PartitionRange, merged_spans, watermarks
from spark_jobs.rebuild import recompute_sessions
from spark_jobs.reconcile.ranges import compare_ranges, range_counts, reason_to_check
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.store import history, ledger, runs, stored_rules, verified
from spark_jobs.store.findings import CHANGED, MOVED
from spark_jobs.store.lock import WriterLease, batch_commit, single_writer
from spark_jobs.store.report import Report
from spark_jobs.store.verified import LedgerRange
from spark_jobs.writer import BatchWriter, Fault

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

REPAIR = "repair"


@dataclass(frozen=True)
class RepairPlan:
    """What a run's findings ask for: ranges to re-read (and, of those, ranges to clear first), entities."""

    run_id: str
    reread: list[PartitionRange]
    clear: list[PartitionRange]
    entities: list[str] | None  # None: every entity (the run could not name them all)
    expired: list[PartitionRange]

    @property
    def empty(self) -> bool:
        return not self.reread and self.entities == []

    def lines(self) -> list[str]:
        """What the repair will do, a line each (the Airflow plan task's log, the repair page)."""
        lines = [f"repair of reconcile run {self.run_id}:"]
        lines += [f"  re-read {r}" + (" (cleared first)" if r in self.clear else "") for r in self.reread]
        if self.entities is None:
            lines.append("  recompute every entity's sessions from events")
        elif self.entities:
            lines.append(f"  recompute the sessions of {len(self.entities):,} entities from events")
        lines += [f"  expired, cannot be re-read: {r}" for r in self.expired]
        return lines


def plan_repair(run_id: str, findings: list[dict]) -> RepairPlan:
    """The repair of ``findings`` (``reconcile_runs.findings``), pure."""
    reread, clear, expired, entities = [], [], [], set()
    every_entity = False
    for f in findings:
        kind = f["kind"]
        if kind in ("range", "gap"):
            r = PartitionRange(f["topic"], f["partition"], f["start"], f["end"])
            outcome = f.get("outcome", "missing")
            if outcome == "expired":
                expired.append(r)
                continue
            reread.append(r)
            if outcome in ("extra", "changed"):
                clear.append(r)
        elif kind in ("sessions_sinks", "sessions_events"):
            entities |= set(f["sessions"])
            every_entity |= f["entity_count"] > len(f["sessions"])
        elif kind == "sessions_totals":  # totals differ but no session was named: recompute all
            every_entity = True
    return RepairPlan(
        run_id,
        merged_spans(reread),
        merged_spans(clear),
        None if every_entity else sorted(entities),
        expired,
    )


@dataclass(frozen=True)
class RepairOutcome:
    repair_id: str
    plan: RepairPlan
    actions: list[str]
    recheck: Report

    def describe(self) -> str:
        lines = [f"tidemark repair {self.repair_id} of reconcile run {self.plan.run_id}:"]
        lines += [f"- {a}" for a in self.actions] or ["- nothing to rewrite"]
        lines.append(self.recheck.summary())
        return "\n".join(lines)


def load_findings(settings: Settings, run_id: str | None) -> tuple[str, list[dict]]:
    """The id and findings of ``run_id`` (default: the latest run that found a mismatch); checks
    before any work."""
    with db.transaction(settings.pipeline_dsn) as cur:
        row = history.run_findings(cur, run_id)
    if row is None:
        raise ConfigError(
            f"no reconcile run {run_id!r}: give the run id from the alert (tidemark reconcile --show lists the latest)"
            if run_id
            else "no reconcile run found a mismatch: nothing to repair"
        )
    found_id, status, findings = row
    if status != "mismatch":
        raise ConfigError(f"reconcile run {found_id} found nothing to repair (status {status})")
    if findings is None:
        raise ConfigError(
            f"reconcile run {found_id} predates named findings; run `tidemark reconcile` and repair that run"
        )
    return found_id, findings


def load_plan(settings: Settings, run_id: str | None) -> RepairPlan:
    """The repair plan of ``run_id``'s findings as the run recorded them (default: the latest mismatch)."""
    return plan_repair(*load_findings(settings, run_id))


def repair(
    spark: SparkSession,
    settings: Settings,
    run_id: str | None = None,
    repair_id: str | None = None,
    fault: Fault | None = None,
) -> RepairOutcome:
    """Repair the findings of ``run_id`` (default: the latest mismatch) that still hold, then re-check.
    ``fault``, for the crash tests: called at the writer's fault points of each batch the repair writes."""
    run_id, findings = load_findings(settings, run_id)
    repair_id = repair_id or reconcile.new_run_id("repair")
    _record(settings, repair_id, run_id, [], None, "running")
    actions: list[str] = []
    try:
        recorded = runs.recorded(settings, f"{REPAIR}:{settings.topic}", settings.topic, measure_lag=False)
        with recorded as run, single_writer(settings, f"{REPAIR}:{run_id}", wait=True) as lease:
            # Re-read records are checked with the contract the stored ones follow.
            stored_rules.verify_contract(settings)
            # Under the writer lock: nothing changes between the re-check and the writes.
            findings, notes = still_found(spark, settings, findings)
            actions += notes
            plan = plan_repair(run_id, findings)
            by_topic: dict[str, list[PartitionRange]] = defaultdict(list)
            for r in plan.reread:
                by_topic[r.topic].append(r)
            for topic, ranges in sorted(by_topic.items()):
                clear = [r for r in plan.clear if r.topic == topic]
                actions += _reprocess(spark, settings, lease, topic, ranges, clear, repair_id, fault, run.results)
            if plan.entities is None or plan.entities:
                written, removed = recompute_sessions(spark, settings, lease, plan.entities)
                who = "every entity" if plan.entities is None else f"{len(plan.entities):,} entities"
                actions.append(
                    f"sessions of {who} recomputed from events: "
                    f"{written:,} PostgreSQL rows written, {removed:,} removed"
                )
        actions += [f"{r}: expired (retention removed it), cannot be re-read" for r in plan.expired]
        recheck = reconcile.run(settings, reconcile.new_run_id("recheck"), lambda: spark, repair_of=run_id, wait=True)
    except BaseException:
        _record(settings, repair_id, run_id, actions, None, "failed")
        raise
    _record(settings, repair_id, run_id, actions, recheck.run_id, recheck.status)
    return RepairOutcome(repair_id, plan, actions, recheck)


def still_found(spark: SparkSession, settings: Settings, findings: list[dict]) -> tuple[list[dict], list[str]]:
    """``findings`` with each range finding checked again as the sinks are now (call holding the
    writer lock): one that no longer holds is left out, the others take their outcome of now.
    Returns them and a line per finding left out.

    A range a recorded batch moved since the finding (a readmit of a record in it; the readmit-first
    batch of an earlier, crashed attempt of this repair) can only be compared by count and offsets: a
    changed value at the same offsets would pass, and the damage become the range's baseline. Such a
    finding is kept as it was found: the repair reads the range again from Kafka, which is always safe."""
    ranges = [f for f in findings if f["kind"] == "range"]
    if not ranges:
        return findings, []
    entries = [
        LedgerRange(f["pipeline"], f["batch_id"], PartitionRange(f["topic"], f["partition"], f["start"], f["end"]))
        for f in ranges
    ]
    with db.transaction(settings.pipeline_dsn) as cur:
        baselines = verified.verified_ranges(cur)
    to_check = [(e, reason_to_check(e, baselines, CHANGED)) for e in entries]
    tables = {name: delta.table(spark, settings.table_path(name)).toDF() for name in RECORD_TABLES}
    checks = compare_ranges(settings, to_check, range_counts(spark, tables, entries), baselines)
    kept, notes = [f for f in findings if f["kind"] != "range"], []
    for finding, check, (_, reason) in zip(ranges, checks, to_check, strict=True):
        if reason == MOVED:
            kept.append(finding)
            notes.append(f"{check.where}: moved since the finding ({finding.get('outcome')}); read again from Kafka")
        elif check.matches:
            notes.append(f"{check.where}: the finding ({finding.get('outcome')}) no longer holds; left as it is")
        else:
            kept.append({**finding, "outcome": check.outcome})
    return kept, notes


def _reprocess(
    spark: SparkSession,
    settings: Settings,
    lease: WriterLease,
    topic: str,
    ranges: list[PartitionRange],
    clear: list[PartitionRange],
    repair_id: str,
    fault: Fault | None = None,
    results: list | None = None,
) -> list[str]:
    """Re-read ``ranges`` as ``repair:<topic>`` batches (one range per partition each), clearing ``clear`` first;
    what each batch did goes to ``results`` (the repair's row of the runs table)."""
    held = watermarks(settings, topic)
    topic_id = ledger.verify_topic(settings, topic, held)  # a topic created again: nothing is cleared
    low = {p: lo for p, (lo, _) in held.items()}

    def can_read(r: PartitionRange) -> PartitionRange | None:
        start = max(r.start, low.get(r.partition, 0))
        return PartitionRange(r.topic, r.partition, start, r.end) if start < r.end else None

    actions = []
    for r in ranges:
        gone_to = min(max(r.start, low.get(r.partition, 0)), r.end)
        if gone_to > r.start:
            kept = " their rows are kept as they are," if any(c.overlaps(r) for c in clear) else ""
            actions.append(
                f"{r}: offsets [{r.start}, {gone_to}) are gone (retention):{kept} a repair cannot read them again"
            )
    readable = [c for c in map(can_read, ranges) if c is not None]
    # Only what Kafka still holds is cleared: a row is never deleted unless it can be written again.
    clear = [c for c in map(can_read, clear) if c is not None]
    if clear:
        actions += _readmit_first(spark, replace(settings, topic=topic), lease, clear, fault)
    before = _held(spark, settings, readable)
    if clear:
        with batch_commit(settings, lease):
            for name in RECORD_TABLES:
                delta.table(spark, settings.table_path(name)).delete(delta.range_filter(clear))
        actions.append(f"cleared {', '.join(str(r) for r in clear)} from the record tables to rewrite them")
    pipeline = f"{REPAIR}:{topic}"
    for batch in _batches(readable):
        with db.transaction(settings.pipeline_dsn) as cur:
            batch_id = ledger.next_batch_id(cur, pipeline)
        # Scoped by the repair: a batch id and ranges an earlier, failed repair used write afresh here
        # (this repair cleared what that one wrote).
        writer = BatchWriter(
            spark, settings, lease, pipeline, _these(batch), fault=fault, scope=repair_id, topic_id=topic_id,
            rewrites=True,
        )  # fmt: skip
        writer.write(read_range(spark, settings, batch), batch_id)
        if results is not None:
            results += writer.results
    after = _held(spark, settings, readable)
    for r, (n_before, n_after) in zip(readable, zip(before, after, strict=True), strict=True):
        actions.append(f"{r}: re-read from Kafka; the sinks held {n_before:,} rows of it, now {n_after:,}")
    return actions


def _readmit_first(
    spark: SparkSession, settings: Settings, lease: WriterLease, clear: list[PartitionRange], fault: Fault | None
) -> list[str]:
    """Readmit the quarantined records in ``clear`` that the contract accepts now (it was fixed since
    they were quarantined). Cleared and read again, they would go to ``events`` while the quarantine
    totals still counted them; readmitted, their batch records what left quarantine, crash-safe
    (:mod:`spark_jobs.readmit`), and the re-read finds them accepted as the readmit left them."""
    came = readmit.readmit_holding(spark, settings, lease, readmit.Selection(), fault=fault, within=clear)
    if not came.back and not came.batches:
        return []
    first = f"readmitted first the quarantined records in them that the contract accepts now: {came.back:,}"
    return [first, *came.batches]


def _held(spark: SparkSession, settings: Settings, ranges: list[PartitionRange]) -> list[int]:
    tables = {name: delta.table(spark, settings.table_path(name)).toDF() for name in RECORD_TABLES}
    entries = [LedgerRange(REPAIR, 0, r) for r in ranges]
    return [n for n, _, _ in range_counts(spark, tables, entries)]


def _these(ranges: list[PartitionRange]) -> Callable[[int], list[PartitionRange]]:
    """A writer's ``ranges_for`` of one batch: ``ranges``, whatever its batch id."""
    return lambda _: ranges


def _batches(ranges: list[PartitionRange]) -> list[list[PartitionRange]]:
    """Group ranges into batches with at most one range per partition (a batch's ranges are per partition)."""
    per_partition: dict[int, list[PartitionRange]] = defaultdict(list)
    for r in sorted(ranges, key=lambda r: (r.partition, r.start)):
        per_partition[r.partition].append(r)
    depth = max((len(v) for v in per_partition.values()), default=0)
    return [[v[i] for v in per_partition.values() if i < len(v)] for i in range(depth)]


def _record(
    settings: Settings, repair_id: str, run_id: str, actions: list[str], recheck: str | None, status: str
) -> None:
    with db.transaction(settings.pipeline_dsn) as cur:
        history.record_repair(cur, repair_id, run_id, actions, recheck, status)


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session
    from spark_jobs.store.ledger import stored_records

    parser = argparse.ArgumentParser(description="tidemark repair: rewrite what a reconcile run named, re-check")
    parser.add_argument("--run-id", help="the reconcile run to repair (default: the latest mismatch)")
    parser.add_argument("--repair-id", help="this repair's id (Airflow passes its run_id)")
    args = parser.parse_args(argv)
    settings = Settings.from_env().for_run()  # its pipeline and topic, before any work
    load_plan(settings, args.run_id)  # bad input fails before Spark starts
    spark = build_session(settings, "tidemark-repair", stored_records(settings))
    outcome = repair(spark, settings, args.run_id, args.repair_id)
    # Recorded in `repairs`; the verdict task reads the re-check and alerts when it still finds something.
    print(outcome.describe())


if __name__ == "__main__":
    run_job(main)
