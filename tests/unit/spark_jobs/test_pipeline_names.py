"""Where a pipeline's state lives: ``events`` keeps the names a deployment made before pipelines has, another
pipeline has its own, each named after it."""

from __future__ import annotations

import pytest

from spark_jobs.pipeline_names import DAG_KINDS, DEFAULT_PIPELINE, PipelineNames


def test_the_default_pipeline_keeps_the_unsuffixed_names() -> None:
    events = PipelineNames(DEFAULT_PIPELINE)
    assert DEFAULT_PIPELINE == "events"
    assert events.postgres_schema == "public"
    assert events.folder("s3a://bucket/lake/") == "s3a://bucket/lake" and events.folder("/data/lake") == "/data/lake"
    assert events.lock_key("tidemark-writer") == "tidemark-writer"
    assert [events.dag_id(kind) for kind in DAG_KINDS] == [
        "tidemark_ingest",
        "tidemark_backfill",
        "tidemark_reconcile",
        "tidemark_repair",
        "tidemark_readmit",
        "tidemark_maintenance",
    ]
    assert events.asset == ("tidemark_sinks", "tidemark://sinks")
    assert events.app_name("ingest") == "tidemark-ingest"
    assert (events.cli_flag, events.page_query) == ("", {})


def test_another_pipeline_has_its_own_names() -> None:
    web = PipelineNames("web")
    assert web.postgres_schema == "web"
    assert web.folder("s3a://bucket/lake/") == "s3a://bucket/lake/web" and web.folder("/ckpt") == "/ckpt/web"
    assert web.lock_key("tidemark-writer") == "tidemark-writer:web"
    assert web.dag_id("ingest") == "tidemark_ingest__web" and web.dag_id("maintenance") == "tidemark_maintenance__web"
    assert web.asset == ("tidemark_sinks__web", "tidemark://sinks/web")
    assert web.app_name("reconcile") == "tidemark-reconcile-web"
    assert (web.cli_flag, web.page_query) == (" --pipeline web", {"pipeline": "web"})


def test_a_schema_names_its_pipeline_and_the_default_pipeline_is_listed_first() -> None:
    assert PipelineNames.of_schema("public") == PipelineNames("events")
    assert PipelineNames.of_schema("web") == PipelineNames("web")
    for name in ("events", "web"):
        assert PipelineNames.of_schema(PipelineNames(name).postgres_schema).name == name
    names = sorted(map(PipelineNames, ["web", "alerts", "events"]), key=lambda n: n.sort_key)
    assert [n.name for n in names] == ["events", "alerts", "web"]


def test_the_default_pipelines_topic_is_the_setting_and_anothers_its_name_unless_its_entry_names_one() -> None:
    events, web = PipelineNames("events"), PipelineNames("web")
    assert (events.topic(None, "clicks"), events.topic("events-v2", "clicks")) == ("clicks", "events-v2")
    assert (web.topic(None, "clicks"), web.topic("web-clicks", "clicks")) == ("web", "web-clicks")
    # Without its entry: the setting's for events, nothing known for another.
    assert (events.settings_topic("clicks"), web.settings_topic("clicks")) == ("clicks", "")
    # The default pipeline's topic as a pipeline's settings know it: another pipeline's settings hold their own.
    assert (events.events_topic("clicks"), web.events_topic("web-clicks")) == ("clicks", "events")


def test_a_dag_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        PipelineNames("web").dag_id("ingests")
