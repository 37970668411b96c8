import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.cli import build_parser, main


def test_produce_flags_parse_into_typed_values() -> None:
    args = build_parser().parse_args(
        [
            "produce",
            "--count",
            "100",
            "--duplicate-rate",
            "0.1",
            "--transaction-size",
            "10",
            "--abort-rate",
            "0.5",
        ]
    )
    assert (args.count, args.duplicate_rate, args.transaction_size, args.abort_rate) == (100, 0.1, 10, 0.5)


def test_a_scheduled_run_can_acknowledge_records_lost_to_retention() -> None:
    assert build_parser().parse_args(["ingest", "--allow-data-loss"]).allow_data_loss is True
    assert build_parser().parse_args(["ingest"]).allow_data_loss is False


@pytest.mark.parametrize("argv", [["produce", "--late-rate", "2"], ["produce", "--entities", "0"]])
def test_bad_flags_exit_with_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "tidemark produce: error" in capsys.readouterr().err


def test_bad_environment_is_reported_before_any_work(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_PORT", "not-a-port")
    assert main(["status"]) == 2
    assert "TIDEMARK_KAFKA_PORT='not-a-port' is not a port number" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["backfill", "--offsets", "0:10"], "bad offset range '0:10': write PARTITION:START-END"),
        (["backfill", "--offsets", "0:20-10"], "end offset 10 is before start offset 20"),
        (["ingest", "--gap-minutes", "90", "--max-session-hours", "1"], "shorter than the gap"),
        (
            ["reconcile", "--pipeline", "web"],
            "tidemark reconcile: pipelines.yaml declares no pipeline 'web' (it declares events): add it, or name one",
        ),
    ],
)
def test_errors_a_user_can_fix_are_one_line_and_exit_2(argv: list[str], message: str, capsys) -> None:
    # All of these fail before any service is asked, so no Kafka or PostgreSQL is needed.
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_bug_keeps_its_traceback_with_secrets_masked(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import tidemark.cli

    monkeypatch.setenv("TIDEMARK_POSTGRES_DSN", "host=db dbname=tidemark user=t password=canary-Pw-5f3a9e")

    def broken(settings, args) -> int:
        raise KeyError(f"not a user error: {settings.postgres_dsn}")

    monkeypatch.setitem(tidemark.cli.COMMANDS, "status", broken)
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last)") and "KeyError: 'not a user error: host=db" in err
    assert "canary-Pw-5f3a9e" not in err


def test_sessions_table_keeps_its_columns_aligned_whatever_the_timestamps() -> None:
    from datetime import UTC, datetime

    from tidemark.pipeline_commands import sessions_table

    with_micros = (datetime(2026, 11, 24, 20, 57, 35, 728000, UTC), datetime(2026, 11, 24, 20, 57, 58, 377000, UTC))
    whole_seconds = (datetime(2026, 11, 24, 21, 0, 0, tzinfo=UTC), datetime(2026, 11, 24, 21, 5, 0, tzinfo=UTC))
    lines = sessions_table([("a" * 32, *with_micros, 1547), ("b" * 32, *whole_seconds, 3)])
    assert lines[0].split() == ["session_id", "started_at", "(arrival)", "ended_at", "events"]
    assert lines[1].split()[1:] == ["2026-11-24T20:57:35.728000+00:00", "2026-11-24T20:57:58.377000+00:00", "1547"]
    # Every cell starts under its header, and the counts end under theirs.
    started, ended = lines[0].index("started_at"), lines[0].index("ended_at")
    for line in lines[1:]:
        assert line[started:].startswith("2026-11-24T") and line[ended:].startswith("2026-11-24T")
        assert len(line) == len(lines[0])


def test_status_with_the_services_stopped_exits_2_as_every_fixable_problem_does(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))  # nothing was started from here
    assert main(["status"]) == 2
    out = capsys.readouterr().out
    assert "kafka" in out and "stopped" in out


def test_help_shows_plain_text_not_restructuredtext() -> None:
    from tidemark.cli import build_parser

    assert "``" not in build_parser().format_help()


def run_installed(args: list[str], pipelines_file: Path) -> subprocess.CompletedProcess:
    """The installed ``tidemark`` script, as a user runs it, on ``pipelines_file`` (no service runs)."""
    script = str(Path(sys.executable).parent / "tidemark")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env |= {"TIDEMARK_PIPELINES": str(pipelines_file), "TIDEMARK_HOME": str(pipelines_file.parent / "home")}
    return subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=60)


def test_tidemark_pipelines_lists_and_checks_the_file_and_prints_each_problem_on_its_line(tmp_path: Path) -> None:
    from spark_jobs.settings import PROJECT_ROOT

    listed = run_installed(["pipelines"], PROJECT_ROOT / "pipelines.yaml")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:4] == ["events", "events", "/entity_id", "/event_time"]
    checked = run_installed(["pipelines", "check"], PROJECT_ROOT / "pipelines.yaml")
    assert (checked.returncode, checked.stdout) == (
        0,
        f"{PROJECT_ROOT / 'pipelines.yaml'}: 1 pipeline (events), valid\n",
    )

    broken = tmp_path / "pipelines.yaml"
    shipped = (PROJECT_ROOT / "pipelines.yaml").read_text()
    broken.write_text(shipped.replace("event_time: /event_time", "event_time: /ts").replace("name: events", "name: Ev"))
    failed = run_installed(["pipelines", "check"], broken)
    assert (failed.returncode, failed.stdout) == (2, ""), failed.stderr
    assert failed.stderr.splitlines() == [
        "tidemark pipelines: pipelines.yaml: pipeline 'Ev': name: must be lower-case letters, digits and _, starting "
        "with a letter, at most 40",
    ]
    broken.write_text(
        shipped.replace("event_time: /event_time", "event_time: /ts").replace(
            "  - name: events\n", "  - name: events\n    schedule: quarterly\n"
        )
    )
    failed = run_installed(["pipelines", "check"], broken)
    assert failed.returncode == 2 and failed.stderr.splitlines() == [
        "tidemark pipelines: pipelines.yaml: pipeline 'events': contract.event_time: '/ts' is not a property the "
        "schema declares",
        "tidemark pipelines: pipelines.yaml: pipeline 'events': schedule: 'quarterly' is not a cron expression "
        "(e.g. '*/15 * * * *') or a preset (@hourly, @daily, @weekly, @monthly, @yearly)",
    ], failed.stderr


def test_the_airflow_banner_names_each_pipelines_dags_and_the_entries_that_get_none(tmp_path: Path) -> None:
    import yaml

    from spark_jobs.settings import PROJECT_ROOT, Settings
    from tidemark.local_stack import dags_banner

    shipped = yaml.safe_load((PROJECT_ROOT / "pipelines.yaml").read_text())["pipelines"][0]
    broken = {**shipped, "name": "web", "contract": {**shipped["contract"], "event_time": "/ts"}}
    good = {**shipped, "name": "orders", "topic": "orders"}
    (tmp_path / "pipelines.yaml").write_text(yaml.safe_dump({"pipelines": [shipped, broken, good]}))
    banner = dags_banner(Settings.from_env({"TIDEMARK_PIPELINES": str(tmp_path / "pipelines.yaml")}))
    assert banner == [
        "DAGs of pipeline events (paused until you unpause them): tidemark_ingest, tidemark_backfill, "
        "tidemark_reconcile, tidemark_repair, tidemark_readmit, tidemark_maintenance",
        "DAGs of pipeline orders (paused until you unpause them): tidemark_ingest__orders, tidemark_backfill__orders, "
        "tidemark_reconcile__orders, tidemark_repair__orders, tidemark_readmit__orders, tidemark_maintenance__orders",
        "no DAGs: pipelines.yaml: pipeline 'web': contract.event_time: '/ts' is not a property the schema declares",
    ]
    (tmp_path / "pipelines.yaml").write_text("pipelines: [\n")
    [line] = dags_banner(Settings.from_env({"TIDEMARK_PIPELINES": str(tmp_path / "pipelines.yaml")}))
    assert line.startswith("no DAGs: pipelines.yaml: not valid YAML at line 2")
