"""The commands that work on one pipeline's state (its topic, tables, ledger and lock): produce, land, ingest
and backfill, reconcile and findings, quarantine and readmit, repair, maintain, sessions; and ``pipelines``,
which lists or checks the pipelines file."""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, timedelta
from pathlib import Path

from spark_jobs.errors import TidemarkError
from spark_jobs.settings import Settings
from tidemark.tables import aligned


def cmd_produce(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.offsets import check_reachable
    from tidemark.producer import ProduceSpec, print_progress, produce

    check_reachable(settings)  # Kafka down: one line, not the client's retries

    spec = ProduceSpec(
        count=args.count,
        entities=args.entities,
        skew=args.skew,
        duplicate_rate=args.duplicate_rate,
        late_rate=args.late_rate,
        malformed_rate=args.malformed_rate,
        seed=args.seed,
        arrival_step=timedelta(milliseconds=args.arrival_step_ms) if args.arrival_step_ms else None,
        id_prefix=args.id_prefix,
        contract=settings.contract() if args.pipeline else None,  # --pipeline: samples of its contract
        writer=avro_writer(settings, args.schema) if args.pipeline and settings.contract().avro else None,
    )
    started = time.monotonic()
    report = produce(
        settings,
        spec,
        topic=args.topic,
        partitions=args.partitions,
        transaction_size=args.transaction_size,
        abort_rate=args.abort_rate,
        progress=print_progress if args.count >= 100_000 else None,
    )
    elapsed = time.monotonic() - started
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(report.produced.items()))
    print(f"produced {report.committed:,} committed records to {report.topic} in {elapsed:.1f} s ({kinds})")
    if report.aborted:
        print(f"aborted  {report.aborted:,} records in aborted transactions (never visible to read_committed)")
    return 0


def avro_writer(settings: Settings, schema: Path | None) -> tuple[int, str]:
    """The writer schema an Avro pipeline's samples are written with: the file ``schema``, registered under the
    pipeline's subject (a new version unless it is there), or the subject's newest version; its id and text."""
    registry, subject = settings.schema_registry(), settings.contract().subject
    assert subject is not None  # an Avro contract names one
    if schema is None:
        latest = registry.latest(subject)
        return latest.schema_id, latest.schema
    try:
        text = schema.read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, ValueError) as exc:
        raise TidemarkError(f"--schema {schema}: not an Avro schema file ({exc})") from None
    return registry.register(subject, text), text


def cmd_land(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.land import land
    from spark_jobs.offsets import latest_ranges
    from spark_jobs.spark import build_session

    ranges = latest_ranges(settings, args.topic or settings.topic)
    spark = build_session(settings, "tidemark-land")
    report = land(spark, settings, ranges)
    _print_land(report)
    return 0


def _print_land(report) -> None:  # LandReport, imported lazily
    spans = ", ".join(f"p{r.partition} [{r.start}, {r.end})" for r in report.ranges)
    if report.already_landed:
        print(f"range already landed as batch {report.batch_id}: {spans}; nothing written")
    else:
        print(
            f"landed batch {report.batch_id}: {report.records:,} records read, {report.inserted:,} new rows "
            f"in {report.table}; ranges {spans}"
        )


def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.ingest import describe, run_from_arguments
    from spark_jobs.spark import build_session

    session = lambda records: build_session(settings, f"tidemark-{args.mode}", records)  # noqa: E731
    result = run_from_arguments(session, settings, args)
    print(describe(result))
    return 0


def cmd_reconcile(settings: Settings, args: argparse.Namespace) -> int:
    """Reconcile (Spark only if there is something new to check); exit 1 on a finding."""
    from spark_jobs import db, reconcile
    from spark_jobs.spark import build_session
    from spark_jobs.store import history, ledger

    if args.show is not None:
        with db.transaction(settings.pipeline_dsn) as cur:
            stored = history.stored_report(cur, args.show or None)
        if stored is None:
            raise TidemarkError(f"no reconcile run {args.show!r}" if args.show else "no reconcile run yet")
        print(stored[2])
        return 0 if stored[1] == "ok" else 1
    run_id = args.run_id or reconcile.new_run_id()
    spark = lambda: build_session(settings, "tidemark-reconcile", ledger.stored_records(settings))  # noqa: E731
    report = reconcile.run(settings, run_id, spark, wait=args.wait)
    assert report is not None  # only a run without Spark at hand leaves the report to the Spark job
    print(report.summary())
    return 0 if report.ok else 1


def cmd_findings(settings: Settings, args: argparse.Namespace) -> int:
    """List the open findings (exit 1 while any is open), or acknowledge some."""
    import getpass

    from spark_jobs import db, reconcile
    from spark_jobs.store import open_findings

    if args.acknowledge:
        if args.reason is None:
            raise TidemarkError("say why the findings are acknowledged: --reason TEXT (it is kept with them)")
        closed = reconcile.acknowledge(settings, args.acknowledge, getpass.getuser(), args.reason)
        for finding in closed:
            print(f"acknowledged {finding.describe()}")
    with db.transaction(settings.pipeline_dsn) as cur:
        still = open_findings.read_open(cur)
    if not still:
        print("no open findings")
        return 0
    print(f"{len(still)} open finding{'s' if len(still) > 1 else ''}:")
    for finding in still:
        print(f"- {finding.describe()}")
    print(
        "A repair re-checks and closes what it fixed (`tidemark repair`); what no repair can fix, an operator "
        "acknowledges: `tidemark findings --acknowledge ID --reason TEXT`."
    )
    return 1


def cmd_pipelines(settings: Settings, args: argparse.Namespace) -> int:
    """The pipelines the file declares (``check``: only whether it is valid). Needs no service."""
    declared = settings.pipelines()  # every problem of the file, one line each
    if args.action == "check":
        names = ", ".join(p.name for p in declared)
        print(f"{settings.pipelines_file}: {len(declared)} pipeline{'s' * (len(declared) != 1)} ({names}), valid")
        return 0
    print("\n".join(pipelines_table(declared)))
    return 0


def pipelines_table(declared: list) -> list[str]:  # list[Pipeline]
    """``tidemark pipelines``' table: a line a pipeline with its topic, roles, sessions and schedule."""

    def sessions(rules) -> str:  # SessionRules | None
        if rules is None:
            return "off"
        return f"gap {rules.gap.total_seconds() / 60:g} min, at most {rules.max_length.total_seconds() / 3600:g} h"

    header = ("pipeline", "topic", "entity id", "event time", "sessions", "schedule", "contract")
    rows = [
        (p.name, p.topic, p.contract.entity_id, p.contract.event_time, sessions(p.sessions), p.schedule or "manual")
        + (p.contract.digest[:12],)
        for p in declared
    ]
    return aligned([header, *rows])


def cmd_quarantine(settings: Settings, args: argparse.Namespace) -> int:
    """Quarantined records by reason, with the latest sample records of each (from PostgreSQL, no Spark)."""
    from spark_jobs import db
    from spark_jobs.store import quarantine

    with db.transaction(settings.pipeline_dsn) as cur:
        totals = quarantine.totals(cur, args.reason)
        samples = {t.reason: quarantine.latest_samples(cur, t.reason, args.limit) for t in totals}
    if not totals:
        print(f"no record quarantined for {args.reason!r}" if args.reason else "no record quarantined")
        return 0
    print("\n".join(quarantine_table(totals)))
    for t in totals:
        if samples[t.reason]:
            shown = len(samples[t.reason])
            print(f"\n{t.reason}: {shown} sample record{'s' * (shown != 1)} of {t.records:,}, the latest first")
            print("\n".join(f"  {sample.describe()}" for sample in samples[t.reason]))
    print(
        f"\nEach batch keeps the first {quarantine.SAMPLES} records of each reason as samples (--limit N shows up to N "
        f"a reason, 0 none); every quarantined record, with its whole key and value, is in the Delta table "
        f"{settings.table_path('quarantine')}."
    )
    return 0


def quarantine_table(totals: list) -> list[str]:  # quarantine.ReasonTotal
    """``tidemark quarantine``'s table: a line per reason, most records first."""
    from spark_jobs.store.quarantine import reason_code

    header = ("records", "code", "reason", "first seen (UTC)", "last seen (UTC)")
    cells = [
        (
            f"{t.records:,}",
            reason_code(t.reason),
            t.reason,
            f"{t.first_at.astimezone(UTC):%Y-%m-%d %H:%M}",
            f"{t.last_at.astimezone(UTC):%Y-%m-%d %H:%M}",
        )
        for t in totals
    ]
    return aligned([header, *cells], right={0}, rule=True)


def cmd_maintain(settings: Settings, args: argparse.Namespace) -> int:
    """Compact, checkpoint and vacuum the Delta tables; prune old reconcile history."""
    from spark_jobs import db
    from spark_jobs.maintenance import maintain
    from spark_jobs.spark import build_session
    from spark_jobs.store.ledger import stored_records

    db.check_reachable(settings.pipeline_dsn)  # PostgreSQL down: one line, before Spark starts
    spark = build_session(settings, "tidemark-maintenance", stored_records(settings))
    print(maintain(spark, settings, wait=args.wait).describe())
    return 0


def cmd_repair(settings: Settings, args: argparse.Namespace) -> int:
    """Repair what a reconcile run named, then re-check; exit 1 when the re-check still finds something."""
    from spark_jobs import repair
    from spark_jobs.offsets import check_reachable
    from spark_jobs.spark import build_session

    repair.load_plan(settings, args.run_id)  # an unknown or passing run fails before Spark starts
    check_reachable(settings)
    outcome = repair.repair(build_session(settings, "tidemark-repair"), settings, args.run_id)
    print(outcome.describe())
    return 0 if outcome.recheck.ok else 1


def cmd_readmit(settings: Settings, args: argparse.Namespace) -> int:
    """Bring back the quarantined records the pipeline's contract accepts now (or count them: --dry-run)."""
    from spark_jobs import db, readmit
    from spark_jobs.spark import build_session

    selection = readmit.selection_from(args)  # bad flags fail before Spark starts
    db.check_reachable(settings.pipeline_dsn)
    readmit.refuse_unmatched_reason(settings, selection)  # so does a reason that selects nothing
    outcome = readmit.readmit(build_session(settings, "tidemark-readmit"), settings, selection, args.dry_run)
    print(outcome.describe())
    return 0


def cmd_sessions(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs import db
    from spark_jobs.sinks.postgres import entity_sessions

    with db.transaction(settings.pipeline_dsn) as cur:
        rows = entity_sessions(cur, args.entity_id)
    if not rows and settings.session_rules is None:
        print(f"no sessions: the pipeline {settings.pipeline!r} cuts none (sessions: off)")
        return 1
    if not rows:
        print(f"no sessions for entity {args.entity_id!r}")
        return 1
    print("\n".join(sessions_table(rows)))
    return 0


def sessions_table(rows: list[tuple]) -> list[str]:
    """``tidemark sessions``' table: a header line, then a line a session (session_id, started_at,
    ended_at, event_count), in columns as wide as their cells: a timestamp's ISO form is 32
    characters with microseconds and 25 without."""
    header = ("session_id", "started_at (arrival)", "ended_at", "events")
    cells = [(sid, started.isoformat(), ended.isoformat(), str(count)) for sid, started, ended, count in rows]
    return aligned([header, *cells], right={3})
