"""``tidemark``: run the embedded stack, migrate the database, produce events, run jobs.

Every command builds :class:`Settings` once from the environment (``TIDEMARK_*``) and its flags.
Errors that a user can fix print one line that says how, and exit with status 2 (so do ``status``
and ``doctor`` when something is stopped or missing: their output says what to do).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

from spark_jobs.errors import TidemarkError
from spark_jobs.secrets import redact
from spark_jobs.settings import Settings
from spark_jobs.store.quarantine import SAMPLES
from tidemark import demo, doctor
from tidemark.local_stack import EXIT_USAGE, cmd_airflow, cmd_down, cmd_migrate, cmd_status, cmd_up
from tidemark.options import fraction, non_negative, positive
from tidemark.pipeline_commands import (
    cmd_findings,
    cmd_ingest,
    cmd_land,
    cmd_maintain,
    cmd_pipelines,
    cmd_produce,
    cmd_quarantine,
    cmd_readmit,
    cmd_reconcile,
    cmd_repair,
    cmd_sessions,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidemark", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_stack_commands, _produce_command, _pipeline_commands, _demo_command, _common_flags):
        add(sub)
    return parser


def _stack_commands(sub) -> None:  # argparse's subparsers
    """up, down, status, airflow, doctor, db migrate."""

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


def _produce_command(sub) -> None:
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
        "--schema",
        type=Path,
        help="an Avro pipeline's: the Avro schema file (.avsc) to write with, registered under the pipeline's "
        "subject first (default: the subject's newest version)",
    )
    produce.add_argument(
        "--arrival-step-ms",
        type=non_negative,
        default=0,
        help="simulate arrival times this far apart (topic uses CreateTime)",
    )


def _pipeline_commands(sub) -> None:
    """The commands that work on one pipeline's state."""
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


def _demo_command(sub) -> None:
    demo = sub.add_parser("demo", help="produce demo events and run the Spark job; prints a summary")
    demo.add_argument("--count", type=positive, default=5_000)


def _common_flags(sub) -> None:
    """``--verbose`` on every command, ``--pipeline`` on those of :data:`PIPELINE_COMMANDS`."""
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
