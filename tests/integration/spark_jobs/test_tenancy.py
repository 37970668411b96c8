"""Pipelines are tenants: no name, setting or flag a user writes puts one pipeline's data in another's.

Against real Kafka, Spark/Delta and PostgreSQL, and the installed ``tidemark`` command where a user
selects a run's pipeline: a pipeline named like the PostgreSQL login role, two names PostgreSQL would
treat as one, and a run selected by ``TIDEMARK_PIPELINE`` or ``--pipeline`` with another topic.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from spark_jobs import ingest
from spark_jobs.offsets import ensure_topic
from spark_jobs.settings import Settings
from spark_jobs.store import ledger
from tests.integration.spark_jobs.checks import delta_rows, query, send
from tests.integration.spark_jobs.test_pipelines import SHIPPED, WEB, send_web
from tests.integration.tidemark.test_errors import NO_SPARK, one_line, tidemark
from tidemark.migrations import migrate_pipelines


def declare(settings: Settings, folder: Path, *entries: dict) -> Settings:
    """``settings`` with a pipelines file of today's ``events`` (on the settings' topic) and ``entries``."""
    config = yaml.safe_load(SHIPPED.read_text())
    config["pipelines"][0]["topic"] = settings.topic
    config["pipelines"] += list(entries)
    path = folder / "pipelines.yaml"
    path.write_text(yaml.safe_dump(config))
    return replace(settings, pipelines_file=path)


def events_of(prefix: str, count: int) -> list[dict]:
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    return [
        {"event_id": f"{prefix}e{i}", "entity_id": f"{prefix}user{i % 2}", "event_type": "click",
         "event_time": (t + timedelta(minutes=i)).isoformat()}
        for i in range(count)
    ]  # fmt: skip


def web_of(prefix: str, count: int) -> list[dict]:
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    return [
        {"messageId": f"{prefix}m{i}", "userId": f"{prefix}visitor{i % 2}",
         "timestamp": (t + timedelta(minutes=i)).isoformat(), "event": "page"}
        for i in range(count)
    ]  # fmt: skip


def test_a_pipeline_named_like_the_login_role_leaves_the_default_pipeline_its_own_schema(
    spark, fresh: Settings, tmp_path: Path
) -> None:
    """PostgreSQL's default search path starts with ``"$user"``: once a schema has the login role's name,
    every table a connection names without a schema resolves there, unless the pipeline names its own."""
    role = query(fresh, "SELECT current_user")[0][0]
    settings = declare(fresh, tmp_path, {**WEB, "name": role, "topic": f"role-{uuid.uuid4().hex[:8]}"})
    migrate_pipelines(settings)  # creates the schema named like the role
    events, named = (settings.for_pipeline(p) for p in settings.pipelines())
    assert named.pipeline == role

    assert query(events, "SELECT current_schema()") == [("public",)]
    assert query(named, "SELECT current_schema()") == [(role,)]
    prefix = f"r{uuid.uuid4().hex[:6]}-"
    ensure_topic(events, events.topic, partitions=1)
    send(events, events.topic, events_of(prefix, 6))
    ingest.run_scheduled(spark, events)

    # The default pipeline's ledger, sessions and writer epoch are in public; the other schema has none of them.
    for table in ("ledger_batches", "sessions"):
        assert query(events, f"SELECT count(*) FROM public.{table}")[0][0] > 0, table
        assert query(events, f'SELECT count(*) FROM "{role}".{table}') == [(0,)], table
    assert query(events, "SELECT epoch FROM public.writer_epochs") == [(1,)]  # the run took the lock once
    assert query(events, f'SELECT epoch FROM "{role}".writer_epochs') == [(0,)]  # as migrated
    assert {r[0] for r in query(named, "SELECT entity_id FROM sessions")} == set()


def test_a_name_with_a_trailing_newline_is_refused_beside_the_name_it_would_become(
    stack: Settings, tmp_path: Path
) -> None:
    """A pattern applied as a search lets ``$`` match before a final newline: ``"web\\n"`` would pass
    beside ``web``, and its ``search_path`` option would resolve to web's schema."""
    settings = declare(
        replace(stack, topic="events"),
        tmp_path,
        {**WEB, "topic": "web-clicks"},
        {**WEB, "name": "web\n", "topic": "web-copy"},
        {**WEB, "name": "shop", "topic": "shop\n"},
    )
    result = tidemark(["pipelines", "check"], {"TIDEMARK_PIPELINES": str(settings.pipelines_file)}, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert any("pipeline 'web\\n': name: must be lower-case letters" in line for line in lines), lines
    assert any("pipeline 'shop': topic: must be a Kafka topic name" in line for line in lines), lines
    assert all(line.startswith("tidemark pipelines: ") for line in lines), lines


@pytest.fixture
def web_beside_events(fresh: Settings, tmp_path: Path) -> tuple[Settings, Settings]:
    """``events`` on this test's topic and ``web`` on its own, migrated; records on both topics."""
    settings = declare(fresh, tmp_path, {**WEB, "topic": f"web-{uuid.uuid4().hex[:8]}"})
    migrate_pipelines(settings)
    events, web = (settings.for_pipeline(p) for p in settings.pipelines())
    prefix = f"s{uuid.uuid4().hex[:6]}-"
    ensure_topic(events, events.topic, partitions=1)
    ensure_topic(web, web.topic, partitions=1)
    send(events, events.topic, events_of(prefix, 5))
    send_web(web, web_of(prefix, 4))
    return events, web


def test_a_run_of_one_pipeline_over_another_pipelines_topic_is_refused_before_any_work(
    web_beside_events: tuple[Settings, Settings], tmp_path: Path
) -> None:
    events, web = web_beside_events
    line = one_line(tidemark(["ingest", "--pipeline", "web", "--topic", events.topic], events.to_env() | NO_SPARK,
                             tmp_path))  # fmt: skip
    assert f"--topic {events.topic!r}: pipeline 'web' reads {web.topic!r}" in line, line
    assert query(web, "SELECT count(*) FROM ledger_batches") == [(0,)]
    assert query(web, "SELECT count(*) FROM ingest_runs") == [(0,)]


def test_the_variable_selects_the_pipeline_and_its_topic_and_the_run_keeps_to_its_state(
    spark, web_beside_events: tuple[Settings, Settings], tmp_path: Path
) -> None:
    """The README's variable for the pipeline a run works on, with ``TIDEMARK_TOPIC`` still set to events'
    topic (as the default pipeline's deployment has it): the run reads web's topic into web's state."""
    events, web = web_beside_events
    result = tidemark(["ingest"], events.to_env() | {"TIDEMARK_PIPELINE": "web"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "read 4 = accepted 4" in result.stdout, result.stdout

    assert {r[0] for r in query(web, "SELECT DISTINCT topic FROM ledger_ranges")} == {web.topic}
    assert {r["topic"] for r in delta_rows(spark, web, "events")} == {web.topic}
    assert query(events, "SELECT count(*) FROM ledger_batches") == [(0,)]  # events' topic is not read
    # The scheduled run's Spark checkpoint is the pipeline's, in its own folder of the checkpoint root.
    root = Path(web.checkpoint_root)
    assert (root / "web" / f"ingest-{web.topic}" / "offsets" / "0").exists()
    assert not (root / f"ingest-{web.topic}").exists()


def test_a_checkpoint_named_by_the_topic_alone_is_moved_by_the_operator_before_a_run(
    spark, web_beside_events: tuple[Settings, Settings]
) -> None:
    """Before a pipeline's checkpoint was its own it was ``<root>/ingest-<topic>``: a run that started a new
    one would plan batches the ledger has with other ranges, so it says where the old one is to go."""
    from spark_jobs.errors import ConfigError

    events, web = web_beside_events
    legacy = Path(web.checkpoint_root) / f"ingest-{web.topic}"
    (legacy / "offsets").mkdir(parents=True)
    with pytest.raises(ConfigError, match=f"is at {legacy}, named by its topic alone; move that folder to "):
        ingest.run_scheduled(spark, web)
    assert query(web, "SELECT count(*) FROM ledger_batches") == [(0,)]
    moved = Path(web.checkpoint(ledger.SCHEDULED))
    moved.parent.mkdir(parents=True)
    legacy.rename(moved)  # what the line says to do
    assert [r.accepted for r in ingest.run_scheduled(spark, web)] == [4]
