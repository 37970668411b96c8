"""The reconcile history: every statement on ``reconcile_runs``, ``reconcile_ranges``, ``reconcile_lag``
and ``repairs``.

A run records itself (:func:`record_run`: its report, the ranges it checked and verified, its lag, and
what it did with the open findings); a repair records what it did; the Airflow verdict, the tidemark
page, ``tidemark reconcile --show`` and maintenance read or prune the same tables here. What a run
starts from is :mod:`spark_jobs.store.verified`'s. Every function takes a psycopg2 cursor: the caller
opens the transaction (``spark_jobs.db.transaction``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from spark_jobs.store import open_findings, verified
from spark_jobs.store.findings import SessionsSummary
from spark_jobs.store.open_findings import FollowUp
from spark_jobs.store.report import Report
from spark_jobs.store.verified import Verified

# ---------------------------------------------------------------------------------------------
# A run's record


def record_run(
    cur,
    report: Report,
    checked: RunChecked,
    repair_of: str | None,
    follow: FollowUp,
) -> None:
    """Write (or, for a retried task, rewrite) this run's rows, what it verified, and what it did
    with the open findings (``follow``)."""
    cur.execute("DELETE FROM reconcile_runs WHERE run_id = %s", (report.run_id,))
    _insert_run(cur, report, checked.counted_at, checked.versions, checked.buckets, repair_of, follow)
    open_findings.record(cur, report.run_id, follow)
    _insert_ranges(cur, report)
    _insert_lag(cur, report)
    verified.record(cur, report.run_id, report.checks, checked.baselines, checked.committed)


@dataclass(frozen=True)
class RunChecked:
    """What a run checked against, as its record keeps it."""

    counted_at: datetime  # the snapshot's time
    versions: dict[str, int] | None  # the Delta versions it read (None: not readable without Spark)
    buckets: dict[str, tuple[int, int]] | None  # Delta sessions per entity bucket (None: not counted)
    baselines: dict[tuple[str, int, str, int], Verified]  # what was verified, as of the snapshot
    committed: set[tuple[str, int]]  # (pipeline, batch_id) of the batches in the snapshot's ledger


def _insert_run(
    cur,
    report: Report,
    counted_at: datetime,
    versions: dict[str, int] | None,
    buckets: dict[str, tuple[int, int]] | None,
    repair_of: str | None,
    follow: FollowUp,
) -> None:
    run_id = report.run_id
    cur.execute(
        """INSERT INTO reconcile_runs (run_id, counted_at, finished_at, status, delta_sessions,
                                       delta_sessions_checksum, postgres_sessions, postgres_sessions_checksum,
                                       ranges_checked, ranges_mismatched, gaps, report, delta_versions, used_spark,
                                       entities_checked, findings, repair_of, alert, snapshot_seconds,
                                       delta_session_buckets, open_findings, opened_findings)
           VALUES (%s, %s, clock_timestamp(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                   %s, %s)""",
        (
            run_id,
            counted_at,
            report.status,
            report.delta_sessions.count,
            report.delta_sessions.checksum,
            report.postgres_sessions.count,
            report.postgres_sessions.checksum,
            len(report.checks),
            len(report.mismatched),
            json.dumps([g.as_dict() for g in report.gaps]),
            report.summary(),
            json.dumps(versions),
            report.used_spark,
            report.entities_checked,
            json.dumps(report.findings()),
            repair_of,
            None if report.ok else report.alert(),
            report.snapshot_seconds,
            None if buckets is None else json.dumps({b: [n, str(c)] for b, (n, c) in sorted(buckets.items())}),
            follow.open_count,
            len(follow.opened),
        ),
    )


def _insert_ranges(cur, report: Report) -> None:
    run_id = report.run_id
    cur.executemany(
        """INSERT INTO reconcile_ranges (run_id, pipeline, batch_id, topic, kafka_partition, start_offset,
                                         end_offset, sink_records, sink_checksum, kafka_records, matches, reason,
                                         outcome)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (
                run_id,
                c.pipeline,
                c.batch_id,
                c.topic,
                c.partition,
                c.start,
                c.end,
                c.sink_records,
                c.sink_checksum,
                c.kafka_records,
                c.matches,
                c.reason,
                c.outcome,
            )  # fmt: skip
            for c in report.checks
        ],
    )


def _insert_lag(cur, report: Report) -> None:
    run_id = report.run_id
    cur.executemany(
        """INSERT INTO reconcile_lag (run_id, topic, kafka_partition, high_watermark, processed_to, behind_records,
                                      oldest_unprocessed, behind_seconds)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (
                run_id,
                g.topic,
                g.partition,
                g.high_watermark,
                g.processed_to,
                g.behind_records,
                g.oldest_unprocessed,
                g.behind_seconds,
            )  # fmt: skip
            for g in report.lags
        ],
    )


# ---------------------------------------------------------------------------------------------
# Reading a run back


def run_report(cur, run_id: str) -> tuple[str, str, str] | None:
    """(run_id, status, report) of run ``run_id``, None when there is no such run."""
    cur.execute("SELECT run_id, status, report FROM reconcile_runs WHERE run_id = %s", (run_id,))
    return cur.fetchone()


def stored_report(cur, run_id: str | None = None) -> tuple[str, str, str] | None:
    """(run_id, status, report) of ``run_id``, or of the latest run."""
    if run_id:
        return run_report(cur, run_id)
    cur.execute("SELECT run_id, status, report FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1")
    return cur.fetchone()


def run_ranges(cur, run_id: str) -> list[tuple]:
    """The ranges run ``run_id`` checked, by partition and offset: (topic, kafka_partition,
    start_offset, end_offset, pipeline, batch_id, reason, sink_records, kafka_records, outcome)."""
    cur.execute(
        """SELECT topic, kafka_partition, start_offset, end_offset, pipeline, batch_id, reason, sink_records,
                  kafka_records, outcome
           FROM reconcile_ranges WHERE run_id = %s ORDER BY topic, kafka_partition, start_offset""",
        (run_id,),
    )
    return cur.fetchall()


def run_verdict(cur, run_id: str) -> tuple | None:
    """(status, report, alert, ranges_checked, used_spark, opened_findings) of run ``run_id``, None
    when there is no such run."""
    cur.execute(
        """SELECT status, report, alert, ranges_checked, used_spark, opened_findings
           FROM reconcile_runs WHERE run_id = %s""",
        (run_id,),
    )
    return cur.fetchone()


def run_findings(cur, run_id: str | None) -> tuple[str, str, list[dict] | None] | None:
    """(run_id, status, findings) of ``run_id``, or of the latest run that found a mismatch."""
    if run_id:
        cur.execute("SELECT run_id, status, findings FROM reconcile_runs WHERE run_id = %s", (run_id,))
    else:
        cur.execute(
            "SELECT run_id, status, findings FROM reconcile_runs WHERE status = 'mismatch' "
            "ORDER BY counted_at DESC LIMIT 1"
        )
    return cur.fetchone()


@dataclass(frozen=True)
class PreviousRun:
    """The latest run that counted the lake (passed or found a mismatch), which the next compares itself with."""

    versions: dict[str, int]  # the Delta versions it read
    delta_sessions: SessionsSummary
    counted_at: datetime
    buckets: dict[str, tuple[int, int]] | None  # Delta sessions per entity bucket (None: not counted)


def previous_run(cur) -> PreviousRun | None:
    """The latest run that counted the lake, None before the first."""
    cur.execute(
        """SELECT delta_versions, delta_sessions, delta_sessions_checksum, counted_at, delta_session_buckets
           FROM reconcile_runs
           WHERE status IN ('ok', 'mismatch') AND delta_versions IS NOT NULL
           ORDER BY counted_at DESC LIMIT 1"""
    )
    row = cur.fetchone()
    if row is None:
        return None
    buckets = None if row[4] is None else {b: (int(n), int(c)) for b, (n, c) in row[4].items()}
    return PreviousRun(row[0], SessionsSummary(int(row[1]), int(row[2])), row[3], buckets)


# ---------------------------------------------------------------------------------------------
# Repairs


def record_repair(cur, repair_id: str, run_id: str, actions: list[str], recheck: str | None, status: str) -> None:
    """Write (or update) repair ``repair_id`` of run ``run_id``: its actions so far, its re-check run and status."""
    cur.execute(
        """INSERT INTO repairs (repair_id, reconcile_run, actions, recheck_run, status)
           VALUES (%s, %s, %s, %s, %s)
           ON CONFLICT (repair_id) DO UPDATE SET actions = EXCLUDED.actions,
               recheck_run = EXCLUDED.recheck_run, status = EXCLUDED.status,
               finished_at = CASE WHEN EXCLUDED.status = 'running' THEN NULL ELSE now() END""",
        (repair_id, run_id, json.dumps(actions), recheck, status),
    )


def repair_recheck(cur, repair_id: str) -> tuple[str | None, list[str]] | None:
    """(recheck_run, actions) of repair ``repair_id``, None when there is no such repair."""
    cur.execute("SELECT recheck_run, actions FROM repairs WHERE repair_id = %s", (repair_id,))
    return cur.fetchone()


# ---------------------------------------------------------------------------------------------
# The tidemark page's history


def recent_runs(cur, limit: int) -> list[tuple]:
    """The latest ``limit`` runs, newest first: (run_id, counted_at, status, ranges_checked,
    ranges_mismatched, used_spark, entities_checked, repair_of, the run's largest lag in seconds)."""
    cur.execute(
        """SELECT r.run_id, r.counted_at, r.status, r.ranges_checked, r.ranges_mismatched, r.used_spark,
                  r.entities_checked, r.repair_of,
                  (SELECT max(l.behind_seconds) FROM reconcile_lag AS l WHERE l.run_id = r.run_id)
           FROM reconcile_runs AS r ORDER BY r.counted_at DESC LIMIT %s""",
        (limit,),
    )
    return cur.fetchall()


# Lag as reconcile runs measured it and as scheduled ingest runs left it (spark_jobs.store.runs), one sample per
# run and partition: (at, topic, kafka_partition, behind_records, behind_seconds, processed_to, high_watermark).
LAG_SAMPLES = """
    SELECT r.counted_at AS at, l.topic, l.kafka_partition, l.behind_records, l.behind_seconds, l.processed_to,
           l.high_watermark
    FROM reconcile_lag AS l JOIN reconcile_runs AS r USING (run_id)
    UNION ALL
    SELECT i.finished_at, l.topic, l.kafka_partition, l.behind_records, l.behind_seconds, l.processed_to,
           l.high_watermark
    FROM ingest_lag AS l JOIN ingest_runs AS i USING (run_id)"""


def recent_lag(cur, limit: int) -> list[tuple]:
    """The lag samples of the latest ``limit`` runs that measured lag (reconcile or scheduled ingest),
    oldest first: (at, topic, kafka_partition, behind_records, behind_seconds, processed_to, high_watermark)."""
    cur.execute(
        f"""WITH samples AS ({LAG_SAMPLES})
            SELECT * FROM samples
            WHERE at >= (SELECT min(at) FROM (SELECT DISTINCT at FROM samples ORDER BY at DESC LIMIT %s) AS latest)
            ORDER BY at, topic, kafka_partition""",
        (limit,),
    )
    return cur.fetchall()


def coverage(cur) -> list[tuple]:
    """Per partition of the checked ledger: (topic, kafka_partition, ledger offsets, verified offsets,
    ranges, verified ranges, open findings). Offsets are counted once however many ranges hold them
    (a replay, a backfill or a repair reads offsets again). A verified range with an open finding is
    not counted as verified until the finding is closed."""
    cur.execute(
        """WITH open_ranges AS (
               SELECT finding->>'pipeline' AS pipeline, (finding->>'batch_id')::bigint AS batch_id,
                      finding->>'topic' AS topic, (finding->>'partition')::integer AS kafka_partition
               FROM findings WHERE closed_at IS NULL AND kind = 'range'),
           open_per_partition AS (
               SELECT finding->>'topic' AS topic, (finding->>'partition')::integer AS kafka_partition, count(*) AS n
               FROM findings WHERE closed_at IS NULL AND finding ? 'partition' GROUP BY 1, 2),
           ranges AS (
               SELECT l.topic, l.kafka_partition, int8range(l.start_offset, l.end_offset) AS offsets,
                      v.pipeline IS NOT NULL AND o.pipeline IS NULL AS verified
               FROM ledger_ranges AS l
               LEFT JOIN verified_ranges AS v USING (pipeline, batch_id, topic, kafka_partition)
               LEFT JOIN open_ranges AS o USING (pipeline, batch_id, topic, kafka_partition)
               WHERE l.pipeline <> 'land'),
           per_partition AS (
               SELECT topic, kafka_partition, range_agg(offsets) AS offsets,
                      range_agg(offsets) FILTER (WHERE verified) AS verified_offsets,
                      count(*) AS ranges, count(*) FILTER (WHERE verified) AS verified_ranges
               FROM ranges GROUP BY 1, 2)
           SELECT p.topic, p.kafka_partition,
                  (SELECT coalesce(sum(upper(r) - lower(r)), 0)::bigint FROM unnest(p.offsets) AS r),
                  (SELECT coalesce(sum(upper(r) - lower(r)), 0)::bigint FROM unnest(p.verified_offsets) AS r),
                  p.ranges, p.verified_ranges, coalesce(o.n, 0)
           FROM per_partition AS p LEFT JOIN open_per_partition AS o USING (topic, kafka_partition)
           ORDER BY 1, 2"""
    )
    return cur.fetchall()


def latest_verdict(cur) -> tuple | None:
    """(run_id, status, counted_at) of the latest run, None before the first."""
    cur.execute("SELECT run_id, status, counted_at FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1")
    return cur.fetchone()


# ---------------------------------------------------------------------------------------------
# Pruning


def prune(cur, history_days: float) -> int:
    """Delete reconcile runs older than ``history_days`` (their ranges, lags and repairs go with
    them), keeping the latest run, which the next reconcile compares itself with; how many."""
    cur.execute(
        """DELETE FROM reconcile_runs
           WHERE counted_at < now() - %s * interval '1 day'
             AND run_id <> (SELECT run_id FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1)""",
        (history_days,),
    )
    pruned = cur.rowcount
    cur.execute("DELETE FROM findings WHERE closed_at < now() - %s * interval '1 day'", (history_days,))
    # The ingest runs' history (spark_jobs.store.runs) is kept as long.
    cur.execute("DELETE FROM ingest_runs WHERE finished_at < now() - %s * interval '1 day'", (history_days,))
    return pruned
