"""``tidemark``: run the embedded stack, migrate the database, produce events, run jobs.

Every command builds :class:`Settings` once from the environment (``TIDEMARK_*``) and its flags.
Errors that a user can fix print one line that says how, and exit with status 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from datetime import timedelta

from spark_jobs.embedded import KafkaBroker, PostgresServer, ServiceError
from spark_jobs.ingest import DataLossError, WriterBusy
from spark_jobs.migrations import MigrationError
from spark_jobs.offsets import TopicError
from spark_jobs.settings import Settings

EXIT_USAGE = 2


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be a positive whole number")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be zero or more")
    return value


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    # Postgres first: it starts in about a second and fails fast on a bad setup.
    print(PostgresServer(settings).start())
    print(KafkaBroker(settings).start())
    return 0


def cmd_airflow(settings: Settings, args: argparse.Namespace) -> int:
    """Run Airflow with tidemark's DAGs in the foreground until Ctrl-C (or SIGTERM), then stop it all."""
    import signal

    from spark_jobs.embedded.airflow import AirflowServices

    airflow = AirflowServices(settings, port=args.port, parallelism=args.parallelism)
    print(f"starting Airflow (api-server, scheduler, dag-processor, triggerer) under {airflow.home} ...")
    airflow.start()
    user, password = airflow.login()
    print(
        f"\nAirflow is ready: {airflow.url}\n  log in as {user} / {password}  (stored in {airflow.password_file})\n"
        f"  DAGs: tidemark_ingest, tidemark_backfill, tidemark_reconcile; component logs in {airflow.home / 'logs'}\n"
        "  Ctrl-C stops every component.",
        flush=True,
    )

    def interrupt(signum, frame) -> None:  # noqa: ANN001 - signal handler signature
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        while all(component in airflow.running() for component in ("api-server", "scheduler")):
            time.sleep(2)
        print("an Airflow component exited; stopping the others (see its log)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        print(f"stopping Airflow: {', '.join(airflow.stop()) or 'nothing was running'}")


def cmd_bench(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.bench import run_from_arguments

    return run_from_arguments(args)  # the bench builds its own settings: own ports and state


def cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    errors = []
    from spark_jobs.embedded.airflow import AirflowServices

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
    return 0 if all(running for running, _ in states.values()) else 1


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.ledger import connect
    from spark_jobs.migrations import migrate

    connect(settings.postgres_dsn).close()  # a clear error if the server is down
    applied = migrate(settings.postgres_dsn)
    print(f"applied {', '.join(applied)}" if applied else "database is up to date")
    return 0


def cmd_produce(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.producer import ProduceSpec, print_progress, produce

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


def _print_land(report) -> None:  # noqa: ANN001 - LandReport, imported lazily
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

    result = run_from_arguments(lambda: build_session(settings, f"tidemark-{args.mode}"), settings, args)
    print(describe(result))
    return 0


def cmd_sessions(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.ledger import connect

    conn = connect(settings.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                """SELECT session_id, started_at, ended_at, event_count, first_event_time, last_event_time
                   FROM sessions WHERE entity_id = %s ORDER BY started_at""",
                (args.entity_id,),
            )
            rows = cur.fetchall()
    finally:
        conn.close()
    if not rows:
        print(f"no sessions for entity {args.entity_id!r}")
        return 1
    print(f"{'session_id':34} {'started_at (arrival)':27} {'ended_at':27} {'events':>6}")
    for session_id, started, ended, count, *_ in rows:
        print(f"{session_id:34} {started.isoformat():27} {ended.isoformat():27} {count:>6}")
    return 0


def _sink_fingerprint(spark, settings: Settings) -> dict[str, tuple[int, str]]:  # noqa: ANN001
    """Row count and an order-independent checksum of each sink table (Delta and PostgreSQL)."""
    from spark_jobs import ledger

    fingerprint = {}
    for table in ("events", "duplicates", "quarantine", "sessions"):
        row = (
            spark.read.format("delta")
            .load(settings.table_path(table))
            .selectExpr("count(*)", "coalesce(sum(cast(xxhash64(to_json(struct(*))) AS decimal(38, 0))), 0)")
            .first()
        )
        fingerprint[f"delta {table}"] = (row[0], str(row[1]))
    conn = ledger.connect(settings.postgres_dsn)
    with conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*), coalesce(md5(string_agg(md5(s::text), '' ORDER BY session_id)), '') FROM sessions s"
        )
        fingerprint["postgres sessions"] = tuple(cur.fetchone())
    conn.close()
    return fingerprint


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Produce, ingest, produce more, ingest again, replay a range with a backfill; show nothing changed."""
    from spark_jobs import ingest
    from spark_jobs.offsets import latest_ranges
    from spark_jobs.producer import ProduceSpec, produce
    from spark_jobs.spark import build_session

    run_id = f"demo{int(time.time())}-"
    spec = ProduceSpec(
        count=args.count,
        entities=50,
        skew=0.2,
        duplicate_rate=0.03,
        late_rate=0.05,
        malformed_rate=0.02,
        seed=1,
        id_prefix=run_id,
    )
    first = produce(settings, spec, partitions=3)
    print(
        f"1. produced {first.committed:,} events to {first.topic!r} "
        f"(duplicates {first.produced['duplicate']}, late {first.produced['late']}, "
        f"malformed {sum(n for k, n in first.produced.items() if k.startswith('malformed'))})"
    )
    spark = build_session(settings, "tidemark-demo")
    print("2. scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, settings)).replace("\n", "\n   "))
    replay_ranges = latest_ranges(settings, settings.topic)
    second = produce(settings, ProduceSpec(**{**spec.__dict__, "seed": 2, "count": args.count // 2}), partitions=3)
    print(f"3. produced {second.committed:,} more events")
    print("4. scheduled run:\n   " + ingest.describe(ingest.run_scheduled(spark, settings)).replace("\n", "\n   "))
    before = _sink_fingerprint(spark, settings)
    plan = ingest.plan_backfill(
        settings, settings.topic, offsets={r.partition: (r.start, r.end) for r in replay_ranges}
    )
    print(
        "5. backfill replay of the range of step 2:\n   " + ingest.describe(ingest.run_backfill(spark, settings, plan))
    )
    after = _sink_fingerprint(spark, settings)
    print(
        f"6. sinks after the replay are {'IDENTICAL' if after == before else 'DIFFERENT'} (row counts and checksums):"
    )
    for name, (rows, _) in after.items():
        print(f"   {name:18} {rows:>8,} rows")
    print(f"\nSessions of one entity: .venv/bin/tidemark sessions {run_id}entity-000000")
    print(f"Delta tables: {settings.lake_root}/{{events,duplicates,quarantine,sessions}}")
    print(f"PostgreSQL:   psql -h 127.0.0.1 -p {settings.postgres_port} -U tidemark tidemark -c 'TABLE ledger_batches'")
    print("Stop everything: make down")
    return 0 if after == before else 1


def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    """Check what tidemark needs and say what to fix."""
    from spark_jobs.embedded.postgres_server import postgres_bin_dir
    from spark_jobs.embedded.process import port_open, require_java
    from spark_jobs.spark import spark_jars

    checks: list[tuple[str, bool, str]] = []

    def check(name: str, probe) -> None:  # noqa: ANN001
        try:
            detail = probe()
            checks.append((name, True, detail or ""))
        except Exception as exc:  # noqa: BLE001 - doctor reports every failure instead of stopping
            checks.append((name, False, str(exc)))

    check("java 17+", require_java)
    check("postgres binaries", lambda: str(postgres_bin_dir()))
    check("spark jars", lambda: f"{len(spark_jars(settings))} jars in {settings.jars_dir / 'spark'}")

    def kafka_jars() -> str:
        jars = list((settings.jars_dir / "kafka").glob("kafka_2.13-*.jar"))
        if not jars:
            raise FileNotFoundError(f"no Kafka broker jars in {settings.jars_dir / 'kafka'}; run `make jars`")
        return jars[0].name

    check("kafka broker jars", kafka_jars)

    def spark_submit() -> str:
        found = shutil.which("spark-submit")
        if found is None:
            raise FileNotFoundError("spark-submit is not on PATH: activate .venv (make venv)")
        return found

    check("spark-submit on PATH", spark_submit)
    for name, service, port in (
        ("kafka", KafkaBroker(settings), settings.kafka_port),
        ("postgres", PostgresServer(settings), settings.postgres_port),
    ):

        def probe(service=service, port=port) -> str:  # noqa: ANN001
            if service.is_running():
                return f"running on port {port}"
            if port_open(port):
                raise ServiceError(f"port {port} is taken by another process")
            raise ServiceError(f"not running (port {port} free): run `tidemark up`")

        check(name, probe)
    for name, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'}  {name:22} {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidemark", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("up", help="start Kafka (KRaft) and PostgreSQL; waits until both accept connections")
    sub.add_parser("down", help="stop what `up` started")
    sub.add_parser("status", help="show whether the services run")
    airflow = sub.add_parser("airflow", help="run Airflow with the tidemark DAGs on 127.0.0.1 until Ctrl-C")
    airflow.add_argument("--port", type=_positive, default=8080, help="API server / UI port (default 8080)")
    airflow.add_argument("--parallelism", type=_positive, default=4, help="task slots (default 4, for 2 cores)")
    sub.add_parser("doctor", help="check Java, jars, ports and services and say what to fix")

    db = sub.add_parser("db", help="database commands")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    db_sub.add_parser("migrate", help="apply sql/ migrations in order (safe to re-run)")

    produce = sub.add_parser("produce", help="write synthetic events to Kafka (creates the topic)")
    produce.add_argument("--count", type=_non_negative, default=10_000, help="records to produce (default 10000)")
    produce.add_argument("--entities", type=_positive, default=100, help="distinct entity_ids (default 100)")
    produce.add_argument("--skew", type=_rate, default=0.0, help="fraction sent to the hottest 1%% of entities")
    produce.add_argument("--duplicate-rate", type=_rate, default=0.0, help="fraction resending an earlier event_id")
    produce.add_argument("--late-rate", type=_rate, default=0.0, help="fraction with an out-of-order event time")
    produce.add_argument("--malformed-rate", type=_rate, default=0.0, help="fraction of malformed records")
    produce.add_argument(
        "--transaction-size",
        type=_non_negative,
        default=0,
        help="records per producer transaction (0: no transactions)",
    )
    produce.add_argument("--abort-rate", type=_rate, default=0.0, help="fraction of transactions aborted")
    produce.add_argument("--partitions", type=_positive, default=3, help="partitions if the topic is created")
    produce.add_argument("--topic", help="topic (default: TIDEMARK_TOPIC or 'events')")
    produce.add_argument("--seed", type=int, default=42, help="random seed; same seed, same records")
    produce.add_argument("--id-prefix", default="", help="prefix for event_ids, to keep separate runs distinct")
    produce.add_argument(
        "--arrival-step-ms",
        type=_non_negative,
        default=0,
        help="simulate arrival times this far apart (topic uses CreateTime)",
    )

    land = sub.add_parser("land", help="land the topic's current range raw into Delta (Spark job)")
    land.add_argument("--topic", help="topic (default: TIDEMARK_TOPIC or 'events')")

    from spark_jobs.ingest import add_backfill_arguments, add_scheduled_arguments

    add_scheduled_arguments(sub.add_parser("ingest", help="scheduled run: process what arrived since the last run"))
    add_backfill_arguments(sub.add_parser("backfill", help="re-process an offset or arrival-time range"))
    sessions = sub.add_parser("sessions", help="show an entity's sessions (from PostgreSQL)")
    sessions.add_argument("entity_id")

    from spark_jobs.bench import add_arguments as add_bench_arguments

    add_bench_arguments(
        sub.add_parser("bench", help="benchmark the pipeline against baselines measured in the same run")
    )
    demo = sub.add_parser("demo", help="produce demo events and run the Spark job; prints a summary")
    demo.add_argument("--count", type=_positive, default=5_000)
    return parser


COMMANDS = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "doctor": cmd_doctor,
    "produce": cmd_produce,
    "land": cmd_land,
    "ingest": cmd_ingest,
    "backfill": cmd_ingest,
    "sessions": cmd_sessions,
    "airflow": cmd_airflow,
    "bench": cmd_bench,
    "demo": cmd_demo,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"tidemark: {exc}", file=sys.stderr)
        return EXIT_USAGE
    handler = cmd_migrate if args.command == "db" else COMMANDS[args.command]
    try:
        return handler(settings, args)
    except (
        ServiceError,
        ConnectionError,
        FileNotFoundError,
        ValueError,
        TopicError,
        MigrationError,
        DataLossError,
        WriterBusy,
    ) as exc:
        print(f"tidemark {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
