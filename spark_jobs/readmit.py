"""Bring quarantined records back: those the pipeline's contract accepts now, as if accepted at arrival.

spark-submit entry point (the ``tidemark_readmit`` DAG's Spark task)::

    spark-submit spark_jobs/readmit.py [--reason R] [--from-time ISO --to-time ISO | --offsets P:S-E,...]
                                       [--dry-run] [--readmit-id ID]

``tidemark readmit`` runs the same :func:`readmit`. Holding the writer lock, it checks the selected
``quarantine`` rows (their key and value, kept there for this) against the contract the pipeline
declares now. Those that pass are processed as batches of the ``readmit:<topic>`` pipeline, one
range per partition each (from the first to the last offset it brings back), exactly as a batch of
records that just arrived: ranked by arrival against the stored copies of their event ids (an
earlier arrival takes a stored event's place, a later one is a duplicate), their entities' sessions
recomputed from the earliest arrival they touch, both sinks, one ledger batch each. A batch writes
``events`` and ``duplicates`` first and deletes its records from ``quarantine`` last, so a record
is always in some record table; after a crash in between, a record is in two, and the next readmit
(which selects it again) finds it held and only deletes its quarantine copy. Records the contract
still refuses stay where they are, with their reason.

The dry run changes nothing: per reason, how many selected records are quarantined and how many
would come back.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs import db
from spark_jobs.contract import COORDINATES
from spark_jobs.errors import ConfigError, run_job
from spark_jobs.offsets import PartitionRange
from spark_jobs.planning import parse_offsets
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.spark import FrozenFrames
from spark_jobs.store import ledger, runs, stored_rules
from spark_jobs.store.lock import single_writer
from spark_jobs.validation import parse_records

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

READMIT = "readmit"


@dataclass(frozen=True)
class Selection:
    """Which quarantined records to check again: every one, or those of a ``reason`` (as ``tidemark
    quarantine`` lists it), an arrival-time range, or offset ranges per partition."""

    reason: str | None = None
    from_time: datetime | None = None
    to_time: datetime | None = None
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.offsets and (self.from_time or self.to_time):
            raise ConfigError("give --offsets or --from-time/--to-time, not both")
        if (self.from_time is None) != (self.to_time is None):
            raise ConfigError("give both --from-time and --to-time (ISO-8601, the end exclusive)")
        for t in (self.from_time, self.to_time):
            if t is not None and t.tzinfo is None:
                raise ConfigError(f"{t.isoformat()} has no UTC offset; write it with one, e.g. 2026-03-01T00:00:00Z")
        if self.from_time and self.to_time and self.from_time >= self.to_time:
            raise ConfigError(f"--from-time {self.from_time.isoformat()} is not before --to-time")

    def document(self, within: list[PartitionRange] | None = None) -> dict:
        """What a readmit batch records of its selection (``readmit_selections``), ``within`` a repair's ranges."""
        return {
            "reason": self.reason,
            "from_time": self.from_time and self.from_time.isoformat(),
            "to_time": self.to_time and self.to_time.isoformat(),
            "offsets": {str(p): list(span) for p, span in sorted(self.offsets.items())},
            "within": None if within is None else [[r.topic, r.partition, r.start, r.end] for r in within],
        }

    @classmethod
    def from_document(cls, document: dict) -> tuple[Selection, list[PartitionRange] | None]:
        """The selection and the ``within`` ranges :meth:`document` recorded."""
        time = lambda key: document[key] and datetime.fromisoformat(document[key])  # noqa: E731
        offsets = {int(p): (span[0], span[1]) for p, span in document["offsets"].items()}
        within = document["within"]
        ranges = None if within is None else [PartitionRange(t, p, start, end) for t, p, start, end in within]
        return cls(document["reason"], time("from_time"), time("to_time"), offsets), ranges

    def describe(self) -> str:
        parts = [f"reason {self.reason!r}"] if self.reason else []
        if self.from_time and self.to_time:
            parts.append(f"arrived {self.from_time.isoformat()} to {self.to_time.isoformat()}")
        parts += [f"partition {p} offsets {s}-{e}" for p, (s, e) in sorted(self.offsets.items())]
        return ", ".join(parts) or "every quarantined record"


@dataclass(frozen=True)
class ReasonOutcome:
    reason: str
    quarantined: int  # selected records of this reason
    back: int  # of those, accepted by the contract now


@dataclass(frozen=True)
class ReadmitOutcome:
    selection: Selection
    reasons: list[ReasonOutcome]
    dry_run: bool
    batches: list[str] = field(default_factory=list)  # what each batch did

    @property
    def back(self) -> int:
        return sum(r.back for r in self.reasons)

    def describe(self) -> str:
        if not self.reasons:
            nothing = f"readmit: no quarantined record matches ({self.selection.describe()})"
            return "\n".join([nothing, *(f"  {b}" for b in self.batches)])
        verb = "would come back" if self.dry_run else "came back"
        lines = [f"readmit{' (dry run)' if self.dry_run else ''}: {self.selection.describe()}"]
        lines += [f"  {r.reason}: {r.quarantined:,} quarantined, {r.back:,} {verb}" for r in self.reasons]
        lines += [f"  {b}" for b in self.batches]
        if self.dry_run:
            lines.append(f"{self.back:,} records would come back; run without --dry-run to readmit them")
        return "\n".join(lines)


def selected(spark: SparkSession, settings: Settings, selection: Selection) -> DataFrame:
    """The quarantine rows of ``selection``."""
    from pyspark.sql import functions as F

    rows = delta.table(spark, settings.table_path("quarantine")).toDF()
    if selection.reason:  # as quarantine.selects: the whole reason, its code, or its start from the code's ':'
        wanted = selection.reason
        by_start = F.col("reason").startswith(wanted) if ":" in wanted else F.lit(False)
        rows = rows.where(
            (F.col("reason") == wanted) | (F.substring_index(F.col("reason"), ":", 1) == wanted) | by_start
        )
    if selection.from_time and selection.to_time:
        rows = rows.where(
            (F.col("arrival_time") >= F.lit(selection.from_time)) & (F.col("arrival_time") < F.lit(selection.to_time))
        )
    if selection.offsets:
        spans = [PartitionRange(settings.topic, p, s, e) for p, (s, e) in sorted(selection.offsets.items())]
        rows = rows.where(delta.range_filter(spans))
    return rows


def checked_again(rows: DataFrame, settings: Settings) -> DataFrame:
    """``rows`` (quarantine rows) with ``back``: the pipeline's contract accepts the record now."""
    from pyspark.sql import functions as F

    as_read = rows.select(*COORDINATES, F.col("arrival_time").alias("timestamp"), "key", "value")
    contract = settings.run_contract()
    verdict = parse_records(as_read, contract, settings.schema_registry()).select(*COORDINATES, "quarantine_reason")
    return rows.join(verdict, list(COORDINATES)).withColumn("back", F.col("quarantine_reason").isNull())


def readmit(
    spark: SparkSession,
    settings: Settings,
    selection: Selection,
    dry_run: bool = False,
    readmit_id: str | None = None,
    fault: Callable[[str], None] | None = None,  # the writer's fault points, for the crash tests
) -> ReadmitOutcome:
    """Readmit the records of ``selection`` the contract accepts now (``dry_run``: only count them)."""
    from spark_jobs import reconcile

    readmit_id = readmit_id or reconcile.new_run_id(READMIT)
    recorded = runs.recorded(settings, f"{READMIT}:{settings.topic}", settings.topic, measure_lag=False)
    with recorded as run, single_writer(settings, f"{READMIT}:{readmit_id}", wait=True) as lease:
        stored_rules.verify_contract(settings)  # the contract the stored records follow, or a compatible change
        with db.transaction(settings.pipeline_dsn) as cur:
            stored_rules.refuse_other_rules(cur, settings.session_rules)  # the sessions' rules, before any work
        outcome = readmit_holding(spark, settings, lease, selection, dry_run=dry_run, fault=fault)
        # The runs table's row: the records it checked again, those that came back, those that stay.
        checked = sum(r.quarantined for r in outcome.reasons)
        run.counted = (checked, outcome.back, checked - outcome.back)
        run.skip = dry_run
        return outcome


def readmit_holding(
    spark: SparkSession,
    settings: Settings,
    lease,  # lock.WriterLease
    selection: Selection,
    dry_run: bool = False,
    fault: Callable[[str], None] | None = None,
    within: list[PartitionRange] | None = None,
) -> ReadmitOutcome:
    """:func:`readmit`, for a caller that holds the writer lock (``lease``) and checked the contract;
    ``within``: only the selected records in these ranges (a repair's, before it clears them).

    First, a readmit batch an earlier readmit began (its attempt recorded, its Delta writes perhaps
    done) and did not commit to the ledger is written again over its ranges: its records may have
    left ``quarantine`` already, and only this batch would bring their sessions to PostgreSQL."""
    from pyspark.sql import functions as F

    pipeline = f"{READMIT}:{settings.topic}"
    with FrozenFrames(spark) as frozen:
        finished = []
        if not dry_run:
            with db.transaction(settings.pipeline_dsn) as cur:
                unfinished = ledger.unfinished_attempts(cur, pipeline)
            for batch_id, spans in unfinished:
                back = frozen.freeze(stopped_batchs_records(spark, settings, pipeline, batch_id, spans))
                line = _write(spark, settings, lease, frozen, pipeline, batch_id, spans, back, fault)
                finished.append(f"finished the readmit that stopped before its ledger commit: {line}")
        rows = frozen.freeze(checked_again(chosen_records(spark, settings, selection, within), settings))
        counts = rows.groupBy("reason").agg(F.count(F.lit(1)).alias("n"), F.count_if("back").alias("back"))
        in_order = counts.orderBy(F.desc("n"), "reason").collect()
        reasons = [ReasonOutcome(r["reason"], r["n"], r["back"]) for r in in_order]
        outcome = ReadmitOutcome(selection, reasons, dry_run, finished)
        if dry_run or not outcome.back:
            return outcome
        # One batch: a range per partition, from the first record it brings back to the last.
        back = rows.where("back")
        spans = [
            PartitionRange(settings.topic, r["partition"], r["first"], r["last"] + 1)
            for r in back.groupBy("partition").agg(F.min("offset").alias("first"), F.max("offset").alias("last"))
            .orderBy("partition").collect()
        ]  # fmt: skip
        with db.transaction(settings.pipeline_dsn) as cur:
            batch_id = ledger.next_batch_id(cur, pipeline)
            record_selection(cur, pipeline, batch_id, selection.document(within))
        line = _write(spark, settings, lease, frozen, pipeline, batch_id, spans, back, fault)
        outcome.batches.append(line)
    return outcome


def chosen_records(
    spark: SparkSession, settings: Settings, selection: Selection, within: list[PartitionRange] | None
) -> DataFrame:
    """The quarantine rows of ``selection``, only those in ``within`` when given."""
    chosen = selected(spark, settings, selection)
    return chosen if within is None else chosen.where(delta.range_filter(within))


def stopped_batchs_records(
    spark: SparkSession, settings: Settings, pipeline: str, batch_id: int, spans: list[PartitionRange]
) -> DataFrame:
    """What readmit batch ``batch_id``, stopped before its ledger commit over ``spans``, brings back: the
    quarantine rows in ``spans`` of the selection it recorded (every row, for a batch of a version that
    recorded none) that the contract accepts now, and those it wrote already to another record table
    whatever the contract says now (a fix reverted since): left in quarantine, they would be held twice."""
    from pyspark.sql import functions as F

    with db.transaction(settings.pipeline_dsn) as cur:
        cur.execute(
            "SELECT selection FROM readmit_selections WHERE pipeline = %s AND batch_id = %s", (pipeline, batch_id)
        )
        row = cur.fetchone()
    selection, within = (Selection(), None) if row is None else Selection.from_document(row[0])
    rows = checked_again(chosen_records(spark, settings, selection, within).where(delta.range_filter(spans)), settings)
    written = delta.held(spark, settings, spans).where(F.col("table") != "quarantine").select(*COORDINATES).distinct()
    rows = rows.join(written.withColumn("written", F.lit(True)), list(COORDINATES), "left")
    return rows.where(F.col("back") | F.col("written").isNotNull()).drop("written")


def record_selection(cur, pipeline: str, batch_id: int, document: dict) -> None:
    """Record what readmit batch ``batch_id`` selects, before its attempt (a batch id whose attempt never
    began is taken again by the next readmit, with its own selection)."""
    cur.execute(
        """INSERT INTO readmit_selections (pipeline, batch_id, selection) VALUES (%s, %s, %s)
           ON CONFLICT (pipeline, batch_id) DO UPDATE SET selection = EXCLUDED.selection, recorded_at = now()""",
        (pipeline, batch_id, json.dumps(document)),
    )


def _write(
    spark: SparkSession,
    settings: Settings,
    lease,  # lock.WriterLease
    frozen: FrozenFrames,
    pipeline: str,
    batch_id: int,
    spans: list[PartitionRange],
    back: DataFrame,
    fault: Callable[[str], None] | None,
) -> str:
    """Write readmit batch ``batch_id`` over ``spans``: the quarantine rows ``back`` come back (none: the
    batch only puts right what its earlier attempt left). Returns what it did, in a line."""
    from pyspark.sql import functions as F

    from spark_jobs.writer import BatchWriter

    coming, counted = frozen.freeze_counted(
        back.select(*COORDINATES, "arrival_time", "reason"),
        F.count(F.lit(1)).alias("records"),
        F.bit_xor(F.xxhash64(*COORDINATES)).alias("digest"),
    )
    writer = BatchWriter(
        spark, settings, lease, pipeline, lambda _: spans, fault=fault, scope=records_scope(counted),
        topic_id=ledger.verify_topic(settings, settings.topic), rewrites=True,
        readmitting=coming if counted["records"] else None,
    )  # fmt: skip
    writer.write(back.select(*COORDINATES, F.col("arrival_time").alias("timestamp"), "key", "value"), batch_id)
    result = writer.results[-1]
    return (
        f"ledger batch {pipeline} {batch_id} ({', '.join(map(str, spans))}): {result.read:,} records in its "
        f"ranges, {result.accepted:,} of them events, {result.duplicates:,} duplicates, "
        f"{result.quarantined:,} quarantined; sessions written {result.sessions_written:,}, removed "
        f"{result.sessions_deleted:,} (a session that now starts at an earlier arrival has a new ID)"
    )


def records_scope(counted: dict) -> str:
    """What names a readmit batch's writes beside its pipeline, id and ranges: the records it brings back
    (their count and a digest of their coordinates), not the readmit that writes it. A readmit that
    finishes another's unfinished batch brings back the same records under the same names, so whichever
    writes a table first, the other's write is skipped, even one in flight when its writer lost the
    lock (a failover)."""
    digest = counted["digest"]
    return f"records-{counted['records']}" + ("" if digest is None else f"-{digest & (2**64 - 1):016x}")


def refuse_unmatched_reason(settings: Settings, selection: Selection) -> None:
    """Before Spark starts: a ``--reason`` that selects no record quarantined now fails with one line that lists the
    pipeline's reasons and their codes (from PostgreSQL's counts)."""
    from spark_jobs.store import quarantine

    if not selection.reason:
        return
    with db.transaction(settings.pipeline_dsn) as cur:
        if quarantine.totals(cur, selection.reason):
            return
        now = quarantine.totals(cur)
    codes = ", ".join(sorted({quarantine.reason_code(t.reason) for t in now})) or "none"
    listed = "; ".join(f"{t.reason} ({t.records:,})" for t in now[:10]) or "nothing"
    raise ConfigError(
        f"--reason {selection.reason!r} selects no record quarantined now in pipeline {settings.pipeline!r}: give a "
        f"reason's code (the text before its ':'; now {codes}) or the start of a reason as `tidemark quarantine` "
        f"lists it. Quarantined now: {listed}"
    )


def selection_from(args: argparse.Namespace) -> Selection:
    """The selection the flags say; bad flags fail here, before Spark starts."""
    offsets = parse_offsets(args.offsets) if args.offsets else {}
    return Selection(args.reason, args.from_time, args.to_time, offsets)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reason",
        help="only records quarantined with this reason: its code (schema, missing_field, ...), "
        "or the start of its text as `tidemark quarantine` lists it",
    )
    p.add_argument("--offsets", help="only these offsets: PARTITION:START-END[,...], END exclusive")
    p.add_argument("--from-time", type=datetime.fromisoformat, help="only records that arrived from (ISO-8601)")
    p.add_argument("--to-time", type=datetime.fromisoformat, help="... up to (exclusive)")
    p.add_argument("--dry-run", action="store_true", help="count per reason what would come back; change nothing")


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session
    from spark_jobs.store.ledger import stored_records

    parser = argparse.ArgumentParser(description="tidemark readmit: quarantined records the contract accepts now")
    add_arguments(parser)
    parser.add_argument("--readmit-id", help="this readmit's id (Airflow passes its run_id)")
    args = parser.parse_args(argv)
    settings = Settings.from_env().for_run()  # its pipeline and topic, before any work
    selection = selection_from(args)  # bad input fails before Spark starts
    refuse_unmatched_reason(settings, selection)
    spark = build_session(settings, "tidemark-readmit", stored_records(settings))
    outcome = readmit(spark, settings, selection, args.dry_run, args.readmit_id)
    print(outcome.describe())


if __name__ == "__main__":
    run_job(main)
