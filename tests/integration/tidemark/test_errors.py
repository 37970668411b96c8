"""What a user sees when a service is down or a name is wrong: one line that says what to do, and no secret.

Each command runs as the user runs it (the installed ``tidemark`` script, in a child process) with
a canary password in the PostgreSQL DSN and in Kafka's SASL options; the canary must appear
nowhere in what the command prints.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from spark_jobs.settings import Settings
from tests.ports import free_port

CANARY = "canary-Pw-5f3a9e"
TIDEMARK = str(Path(sys.executable).parent / "tidemark")  # the venv's command


def tidemark(args: list[str], env: dict[str, str], tmp_path: Path, path: str | None = None):
    return subprocess.run(
        [TIDEMARK, *args], env=environment(env, tmp_path, path), capture_output=True, text=True, timeout=180
    )


def tidemark_watched(args: list[str], env: dict[str, str], tmp_path: Path):
    """:func:`tidemark`, the command lines of the processes it started, and the class archives
    (``*.jsa``) they mapped into memory, sampled while it ran. It returns when the command's own
    process has exited, as a shell prompt does (a process it started may still run)."""
    import psutil

    out, err = (tmp_path / f"{args[0]}-{uuid.uuid4().hex[:8]}.{name}" for name in ("out", "err"))
    with out.open("w") as stdout, err.open("w") as stderr:
        started = subprocess.Popen([TIDEMARK, *args], env=environment(env, tmp_path), stdout=stdout, stderr=stderr)
    commands: set[tuple[str, ...]] = set()
    mapped: set[str] = set()
    deadline = time.monotonic() + 180
    while started.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):  # it ended meanwhile
            for child in psutil.Process(started.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    argv = tuple(child.cmdline())
                    if not argv:  # a child that ended but is not yet reaped has none
                        continue
                    commands.add(argv)
                    if os.path.basename(argv[0]) == "java":
                        mapped |= {m.path for m in child.memory_maps() if m.path.endswith(".jsa")}
        time.sleep(0.2)
    started.wait(timeout=30)
    done = subprocess.CompletedProcess(started.args, started.returncode, out.read_text(), err.read_text())
    return done, commands, mapped


def environment(env: dict[str, str], tmp_path: Path, path: str | None = None) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    environment = {**clean, "TIDEMARK_HOME": str(tmp_path), **env}
    if path is not None:
        environment["PATH"] = path
    return environment


# A Spark master no Spark starts with: a command that started Spark would fail on it instead of
# answering with the line a test expects, so that line proves the answer came before Spark.
NO_SPARK = {"TIDEMARK_SPARK_MASTER": "no-spark-before-this-answer"}


def one_line(result, errors_only: bool = False) -> str:  # CompletedProcess
    """The one line a failed command printed (with ``errors_only``: on stderr; stdout may say what it started)."""
    output = result.stdout + result.stderr
    assert CANARY not in output, output
    lines = [line for line in (result.stderr if errors_only else output).splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, output[-3000:]
    return lines[0]


def secured(dsn_port: int, kafka: str) -> dict[str, str]:
    """Settings whose secrets are the canary."""
    return {
        "TIDEMARK_POSTGRES_DSN": f"host=127.0.0.1 port={dsn_port} dbname=tidemark user=tidemark password={CANARY}",
        "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": kafka,
        "TIDEMARK_KAFKA_OPT_SASL_PASSWORD": CANARY,
    }


@pytest.mark.parametrize(
    "command",
    [["ingest"], ["backfill", "--offsets", "0:0-10"], ["reconcile"], ["repair"], ["readmit"], ["db", "migrate"]],
)
def test_postgres_down_is_one_line_that_names_it_without_the_password(tmp_path: Path, command: list[str]) -> None:
    line = one_line(tidemark(command, secured(free_port(), f"127.0.0.1:{free_port()}"), tmp_path))
    assert "cannot connect to PostgreSQL at 127.0.0.1:" in line and "`tidemark up`" in line, line


@pytest.mark.parametrize("command", [["ingest"], ["backfill", "--offsets", "0:0-10"], ["produce", "--count", "10"]])
def test_kafka_down_is_one_line_before_spark_starts(stack: Settings, tmp_path: Path, command: list[str]) -> None:
    kafka = f"127.0.0.1:{free_port()}"
    env = {**stack.to_env(), **secured(stack.postgres_port, kafka), **NO_SPARK}
    env["TIDEMARK_POSTGRES_DSN"] = stack.postgres_dsn
    line = one_line(tidemark(command, env, tmp_path))
    assert f"cannot reach Kafka at {kafka}" in line and "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS" in line, line


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--from-time", "2026-03-01T00:00:00Z"], "give both --from-time and --to-time"),
        (["--from-time", "2026-03-01T00:00", "--to-time", "2026-03-02T00:00"], "has no UTC offset"),
        (["--offsets", "0:5"], "bad offset range '0:5'"),
    ],
)
def test_bad_readmit_flags_are_one_line_before_spark_starts(tmp_path: Path, flags: list[str], says: str) -> None:
    env = {"TIDEMARK_POSTGRES_PORT": str(free_port()), **NO_SPARK}  # nor PostgreSQL: the flags come first
    line = one_line(tidemark(["readmit", *flags], env, tmp_path))
    assert line.startswith("tidemark readmit: ") and says in line, line


def test_an_unknown_topic_is_one_line_before_spark_starts(stack: Settings, tmp_path: Path) -> None:
    env = {**stack.to_env(), "TIDEMARK_TOPIC": "no-such-topic", **NO_SPARK}
    line = one_line(tidemark(["ingest"], env, tmp_path))
    assert "topic 'no-such-topic' does not exist" in line, line


def test_a_second_reconcile_is_one_line_naming_the_run_in_progress_before_any_counting(
    stack: Settings, tmp_path: Path
) -> None:
    from spark_jobs.store.lock import one_reconcile

    with one_reconcile(stack, "scheduled__2026-11-26T03:00:00+00:00"):
        result = tidemark(["reconcile"], stack.to_env(), tmp_path)
    line = one_line(result)
    assert "reconcile scheduled__2026-11-26T03:00:00" in line and "is checking the sinks" in line, line
    assert "--wait" in line, line


def test_airflow_with_postgres_down_is_one_line(tmp_path: Path) -> None:
    env = {"TIDEMARK_POSTGRES_PORT": str(free_port())}
    line = one_line(tidemark(["airflow", "--port", str(free_port())], env, tmp_path), errors_only=True)
    assert "cannot connect to PostgreSQL" in line and "`tidemark up`" in line, line


def test_airflow_on_a_taken_port_names_the_flag_that_changes_it(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        line = one_line(tidemark(["airflow", "--port", str(port)], {}, tmp_path), errors_only=True)
    assert f"port {port} is already in use" in line and "--port" in line and "TIDEMARK_AIRFLOW_PORT" not in line


def test_doctor_run_by_path_finds_the_virtual_environments_spark_submit(tmp_path: Path) -> None:
    result = tidemark(["doctor"], {}, tmp_path, path="/usr/bin:/bin")
    [spark_submit] = [line for line in result.stdout.splitlines() if "spark-submit" in line]
    assert spark_submit.startswith("ok"), result.stdout


def test_up_with_kafkas_port_taken_names_the_cause_and_leaves_nothing_running(stack: Settings, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: only Kafka's own bind finds it taken
        port = taken.getsockname()[1]
        env = {
            "TIDEMARK_HOME": str(stack.home / "runs" / f"up-{port}"),  # PostgreSQL's user can traverse it
            "TIDEMARK_KAFKA_PORT": str(port),
            "TIDEMARK_KAFKA_CONTROLLER_PORT": str(free_port()),
            "TIDEMARK_POSTGRES_PORT": str(free_port()),
            "TIDEMARK_JARS_DIR": str(stack.jars_dir),
        }
        result = tidemark(["up"], env, tmp_path)
    line = one_line(result, errors_only=True)
    assert line.startswith("tidemark up: Kafka failed during start-up: ") and f"127.0.0.1:{port}" in line, line
    assert "Address already in use" in line, line
    assert "PostgreSQL started" in result.stdout and "PostgreSQL stopped" in result.stdout, result.stdout
    status = tidemark(["status"], env, tmp_path)
    assert status.returncode == 2 and status.stdout.count("stopped") == 2, status.stdout


@pytest.mark.parametrize("command", [["ingest"], ["backfill", "--offsets", "0:0-1"]])
def test_a_busy_writer_is_one_line_naming_the_run_before_spark_starts(
    stack: Settings, tmp_path: Path, command: list[str]
) -> None:
    from spark_jobs.store.lock import single_writer
    from tidemark.producer import ProduceSpec, produce

    topic = f"busy-{tmp_path.name[-12:]}"
    produce(stack, ProduceSpec(count=2, entities=1), topic=topic, partitions=1)
    with single_writer(stack, "backfill:elsewhere"):
        result = tidemark([*command, "--topic", topic], stack.to_env() | NO_SPARK, tmp_path)
    line = one_line(result)
    assert "backfill:elsewhere" in line and "is writing the pipeline 'events'" in line and "--wait" in line, line


def test_records_retention_removed_since_the_last_run_are_one_line_before_spark_starts(
    stack: Settings, spark, tmp_path: Path
) -> None:
    from dataclasses import replace

    from spark_jobs import ingest
    from tests.integration.spark_jobs.checks import delete_records
    from tidemark.producer import ProduceSpec, produce

    topic = f"gone-{uuid.uuid4().hex[:10]}"
    home = tmp_path / "run"
    settings = replace(stack, topic=topic, lake_root=str(home / "lake"), checkpoint_root=str(home / "checkpoints"))
    produce(settings, ProduceSpec(count=4, entities=1), topic=topic, partitions=1)
    ingest.run_scheduled(spark, settings)
    produce(settings, ProduceSpec(count=4, entities=1, seed=2), topic=topic, partitions=1)
    delete_records(settings, 0, 6)  # two records no run read

    result = tidemark(["ingest"], settings.to_env() | NO_SPARK, tmp_path)
    line = one_line(result)
    assert "partition 0 offsets [4, 6) were removed by Kafka's retention since the last run" in line, line
    assert "--allow-data-loss" in line, line


@pytest.mark.parametrize("command", [["ingest", "--topic"], ["reconcile"], ["quarantine"]])
def test_a_database_not_migrated_yet_is_one_line_that_says_to_migrate(
    stack: Settings, tmp_path: Path, command: list[str]
) -> None:
    from spark_jobs import db
    from tidemark.embedded import PostgresServer
    from tidemark.producer import ProduceSpec, produce

    if command[-1] == "--topic":
        command = [*command, f"unmigrated-{uuid.uuid4().hex[:8]}"]
        produce(stack, ProduceSpec(count=2, entities=1), topic=command[-1], partitions=1)

    name = f"tidemark_unmigrated_{uuid.uuid4().hex[:8]}"
    with db.session(PostgresServer(stack).superuser_dsn()) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}" OWNER tidemark')
    try:
        dsn = stack.postgres_dsn.replace("dbname=tidemark", f"dbname={name}")
        line = one_line(tidemark(command, stack.to_env() | {"TIDEMARK_POSTGRES_DSN": dsn} | NO_SPARK, tmp_path))
        assert f"/{name} as tidemark has no table" in line and "run `tidemark db migrate`" in line, line
    finally:
        with db.session(PostgresServer(stack).superuser_dsn()) as conn, conn.cursor() as cur:
            cur.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
