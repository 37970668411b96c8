"""``tidemark``: run the embedded stack, migrate the database, produce events, run jobs.

Every command builds :class:`Settings` once from the environment (``TIDEMARK_*``) and its flags.
Errors that a user can fix print one line that says how, and exit with status 2 (so do ``status``
and ``doctor`` when something is stopped or missing: their output says what to do).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, timedelta

from spark_jobs.errors import ConfigError, TidemarkError
from spark_jobs.quarantine import SAMPLES
from spark_jobs.secrets import redact
from spark_jobs.settings import Settings
from tidemark import demo, doctor
from tidemark.embedded import KafkaBroker, PostgresServer, ServiceError
from tidemark.options import fraction, non_negative, positive
from tidemark.tables import aligned

EXIT_USAGE = 2


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    # Postgres first: it starts in about a second and fails fast on a bad setup.
    postgres = PostgresServer(settings)
    was_running = postgres.is_running()
    print(postgres.start())
    try:
        print(KafkaBroker(settings).start())
    except ServiceError:
        if not was_running:  # a failed start leaves nothing of its own running
            print(postgres.stop())
        raise
    return 0


def dags_banner(settings: Settings) -> list[str]:
    """The DAGs of each pipeline the file declares (loaded paused), and the entries that get none."""
    from spark_jobs.pipelines import DAG_KINDS, dag_id

    try:
        declared = settings.declarations()
    except ConfigError as exc:  # the file as a whole: Airflow shows it as an import error too
        return [f"no DAGs: {line}" for line in str(exc).splitlines()]
    lines = [
        f"DAGs of pipeline {p.name} (paused until you unpause them): {', '.join(dag_id(k, p.name) for k in DAG_KINDS)}"
        for p in declared.pipelines
    ]
    return lines + [f"no DAGs: {line}" for line in declared.lines()]


def cmd_airflow(settings: Settings, args: argparse.Namespace) -> int:
    """Run Airflow with tidemark's DAGs in the foreground until Ctrl-C (or SIGTERM), then stop it all."""
    import signal

    from tidemark.embedded.airflow import AirflowServices

    airflow = AirflowServices(settings, port=args.port, parallelism=args.parallelism)
    print(f"starting Airflow (api-server, scheduler, dag-processor, triggerer) under {airflow.home} ...")
    airflow.start()
    user, password = airflow.login()
    print(
        f"\nAirflow is ready: {airflow.url}\n  log in as {user} / {password}  (stored in {airflow.password_file})\n"
        + "".join(f"  {line}\n" for line in dags_banner(settings))
        + f"  the tidemark page: {airflow.url}/tidemark/; component logs in {airflow.home / 'logs'}\n"
        "  Ctrl-C stops every component.",
        flush=True,
    )

    def interrupt(signum, frame) -> None:  # signal handler signature
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # `tidemark down` (`make down`) asks this way
    airflow.foreground_pid_file.write_text(f"{os.getpid()}\n")
    try:
        while all(component in airflow.running() for component in ("api-server", "scheduler")):
            time.sleep(2)
        print("an Airflow component exited; stopping the others (see its log)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        print(f"stopping Airflow: {', '.join(airflow.stop()) or 'nothing was running'}")
        airflow.foreground_pid_file.unlink(missing_ok=True)


def cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    errors = []
    from tidemark.embedded.airflow import AirflowServices

    stopped = AirflowServices(settings).stop()
    if stopped:
        print(f"Airflow stopped ({', '.join(stopped)})")
    for service in (KafkaBroker(settings), PostgresServer(settings)):
        try:
            print(service.stop())
        except ServiceError as exc:
            errors.append(str(exc))
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    kafka, postgres = KafkaBroker(settings), PostgresServer(settings)
    states = {
        f"kafka     {settings.bootstrap_servers}": (kafka.is_running(), kafka.pid()),
        f"postgres  127.0.0.1:{settings.postgres_port}": (postgres.is_running(), postgres.pid()),
    }
    for name, (running, pid) in states.items():
        print(f"{name:40} {'running (pid ' + str(pid) + ')' if running else 'stopped'}")
    print(f"state     {settings.home}")
    return 0 if all(running for running, _ in states.values()) else EXIT_USAGE  # `tidemark up` starts them


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.db import check_reachable
    from tidemark.migrations import migrate_pipelines

    check_reachable(settings.postgres_dsn)  # a clear error if the server is down
    for schema, applied in migrate_pipelines(settings).items():
        print(f"{schema}: applied {', '.join(applied)}" if applied else f"{schema}: up to date")
    return 0


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
    from spark_jobs.reconcile import history
    from spark_jobs.spark import build_session

    if args.show is not None:
        with db.transaction(settings.pipeline_dsn) as cur:
            stored = history.stored_report(cur, args.show or None)
        if stored is None:
            raise TidemarkError(f"no reconcile run {args.show!r}" if args.show else "no reconcile run yet")
        print(stored[2])
        return 0 if stored[1] == "ok" else 1
    run_id = args.run_id or reconcile.new_run_id()
    report = reconcile.run(settings, run_id, lambda: build_session(settings, "tidemark-reconcile"), wait=args.wait)
    print(report.summary())
    return 0 if report.ok else 1


def cmd_findings(settings: Settings, args: argparse.Namespace) -> int:
    """List the open findings (exit 1 while any is open), or acknowledge some."""
    import getpass

    from spark_jobs import db, reconcile
    from spark_jobs.reconcile import history

    if args.acknowledge:
        if args.reason is None:
            raise TidemarkError("say why the findings are acknowledged: --reason TEXT (it is kept with them)")
        closed = reconcile.acknowledge(settings, args.acknowledge, getpass.getuser(), args.reason)
        for finding in closed:
            print(f"acknowledged {finding.describe()}")
    with db.transaction(settings.pipeline_dsn) as cur:
        still = history.open_findings(cur)
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
    from spark_jobs import db, quarantine

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
    from spark_jobs.quarantine import reason_code

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

    db.check_reachable(settings.pipeline_dsn)  # PostgreSQL down: one line, before Spark starts
    print(maintain(build_session(settings, "tidemark-maintenance"), settings, wait=args.wait).describe())
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidemark", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("up", help="start Kafka (KRaft) and PostgreSQL; waits until both accept connections")
    sub.add_parser("down", help="stop what `up` started")
    sub.add_parser("status", help="show whether the services run")
    airflow = sub.add_parser("airflow", help="run Airflow with the tidemark DAGs on 127.0.0.1 until Ctrl-C")
    airflow.add_argument("--port", type=positive, default=8080, help="API server / UI port (default 8080)")
    airflow.add_argument("--parallelism", type=positive, default=4, help="task slots (default 4, for 2 cores)")
    sub.add_parser("doctor", help="check Java, jars, ports and services and say what to fix")

    db = sub.add_parser("db", help="database commands")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    db_sub.add_parser("migrate", help="apply sql/ migrations in order (safe to re-run)")

    produce = sub.add_parser(
        "produce", help="write synthetic events to Kafka (creates the topic); --pipeline: of its contract"
    )
    produce.add_argument("--count", type=non_negative, default=10_000, help="records to produce (default 10000)")
    produce.add_argument("--entities", type=positive, default=100, help="distinct entity_ids (default 100)")
    produce.add_argument("--skew", type=fraction, default=0.0, help="fraction sent to the hottest 1%% of entities")
    produce.add_argument("--duplicate-rate", type=fraction, default=0.0, help="fraction resending an earlier event_id")
    produce.add_argument("--late-rate", type=fraction, default=0.0, help="fraction with an out-of-order event time")
    produce.add_argument("--malformed-rate", type=fraction, default=0.0, help="fraction of malformed records")
    produce.add_argument(
        "--transaction-size",
        type=non_negative,
        default=0,
        help="records per producer transaction (0: no transactions)",
    )
    produce.add_argument("--abort-rate", type=fraction, default=0.0, help="fraction of transactions aborted")
    produce.add_argument("--partitions", type=positive, default=3, help="partitions if the topic is created")
    produce.add_argument("--topic", help="topic (default: the pipeline's, TIDEMARK_TOPIC or 'events')")
    produce.add_argument("--seed", type=int, default=42, help="random seed; same seed, same records")
    produce.add_argument("--id-prefix", default="", help="prefix for event_ids, to keep separate runs distinct")
    produce.add_argument(
        "--arrival-step-ms",
        type=non_negative,
        default=0,
        help="simulate arrival times this far apart (topic uses CreateTime)",
    )

    land = sub.add_parser("land", help="land the topic's current range raw into Delta (Spark job)")
    land.add_argument("--topic", help="topic (default: TIDEMARK_TOPIC or 'events')")

    from spark_jobs.ingest import add_backfill_arguments, add_scheduled_arguments

    add_scheduled_arguments(sub.add_parser("ingest", help="scheduled run: process what arrived since the last run"))
    add_backfill_arguments(sub.add_parser("backfill", help="re-process an offset or arrival-time range"))
    reconcile = sub.add_parser(
        "reconcile", help="check Kafka against the sinks and the sessions against events; exit 1 on a finding"
    )
    reconcile.add_argument("--run-id", help="name of this run (default: cli__<UTC time>)")
    reconcile.add_argument("--wait", action="store_true", help="queue behind a reconcile run in progress")
    reconcile.add_argument(
        "--show", nargs="?", const="", metavar="RUN_ID", help="print a stored run's report (default: the latest)"
    )
    findings = sub.add_parser("findings", help="list the open findings (exit 1 while any is open), or acknowledge some")
    findings.add_argument(
        "--acknowledge", nargs="+", type=positive, metavar="ID", help="close these open findings (ids as listed)"
    )
    findings.add_argument("--reason", help="why they are acknowledged (required with --acknowledge; kept with them)")
    pipelines = sub.add_parser("pipelines", help="list the pipelines of the pipelines file (no service needed)")
    pipelines.add_argument(
        "action", nargs="?", choices=("list", "check"), default="list", help="check: only check the file"
    )
    quarantine = sub.add_parser("quarantine", help="quarantined records by reason, with sample records")
    quarantine.add_argument("--reason", help="only this reason: its code (e.g. schema) or the start of its text")
    quarantine.add_argument(
        "--limit",
        type=non_negative,
        default=SAMPLES,
        metavar="N",
        help="sample records per reason (default %(default)s; 0: the table alone)",
    )
    from spark_jobs.readmit import add_arguments as add_readmit_arguments

    add_readmit_arguments(
        sub.add_parser("readmit", help="bring back quarantined records the contract accepts now (after a fix)")
    )
    repair = sub.add_parser("repair", help="rewrite what a reconcile run named, then re-check")
    repair.add_argument("--run-id", help="the reconcile run to repair (default: the latest mismatch)")
    maintain = sub.add_parser(
        "maintain", help="compact, checkpoint and vacuum the Delta tables; prune old reconcile history"
    )
    maintain.add_argument("--wait", action="store_true", help="wait for a running writer instead of failing")
    sessions = sub.add_parser("sessions", help="show an entity's sessions (from PostgreSQL)")
    sessions.add_argument("entity_id")

    demo = sub.add_parser("demo", help="produce demo events and run the Spark job; prints a summary")
    demo.add_argument("--count", type=positive, default=5_000)
    for name, command in sub.choices.items():
        command.add_argument(
            "--verbose", action="store_true", help="show Spark's warnings too (TIDEMARK_SPARK_LOG_LEVEL=WARN)"
        )
        if name in PIPELINE_COMMANDS:
            command.add_argument(
                "--pipeline",
                metavar="NAME",
                help="the pipeline of the pipelines file to work on: its topic, "
                "contract, rules, tables and lock (default: the settings', TIDEMARK_PIPELINE and TIDEMARK_TOPIC)",
            )
    return parser


# The commands that work on one pipeline's state.
PIPELINE_COMMANDS = (
    "produce",
    "ingest",
    "backfill",
    "reconcile",
    "findings",
    "quarantine",
    "readmit",
    "repair",
    "maintain",
    "sessions",
)


COMMANDS = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "doctor": doctor.run,
    "produce": cmd_produce,
    "land": cmd_land,
    "ingest": cmd_ingest,
    "backfill": cmd_ingest,
    "reconcile": cmd_reconcile,
    "findings": cmd_findings,
    "quarantine": cmd_quarantine,
    "readmit": cmd_readmit,
    "repair": cmd_repair,
    "maintain": cmd_maintain,
    "pipelines": cmd_pipelines,
    "sessions": cmd_sessions,
    "airflow": cmd_airflow,
    "demo": demo.run,
}


def main(argv: list[str] | None = None) -> int:
    """Run a command. A :class:`TidemarkError` (something the user can fix) is one line on stderr and
    exit status 2; anything else is a bug and keeps its traceback."""
    args = build_parser().parse_args(argv)
    secrets: list[str] = []
    try:
        settings = Settings.from_env()
        if args.verbose and settings.spark_log_level == "ERROR":
            settings = replace(settings, spark_log_level="WARN")
        if not args.verbose:
            # librdkafka's notices (a fresh broker still loading, a retry) only with --verbose; its errors always.
            logging.getLogger("tidemark.kafka").setLevel(logging.ERROR)
        secrets = settings.secrets()
        if args.command in PIPELINE_COMMANDS:  # the run's pipeline and its topic, chosen once, before any work
            settings = settings.for_run(args.pipeline, getattr(args, "topic", None))
        handler = cmd_migrate if args.command == "db" else COMMANDS[args.command]
        return handler(settings, args)
    except TidemarkError as exc:
        # One line a problem (a pipelines file can have several).
        for line in str(exc).splitlines():
            print(redact(f"tidemark {args.command}: {line}", secrets), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception:
        # A bug: the traceback, with any secret it carries masked.
        import traceback

        print(redact(traceback.format_exc(), secrets), file=sys.stderr, end="")
        return 1


if __name__ == "__main__":
    sys.exit(main())
