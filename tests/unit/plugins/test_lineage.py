"""OpenLineage datasets and facets of tidemark's runs, named as OpenLineage's naming conventions say (the run
through Airflow's provider and a real transport is tests/integration/dags/test_airflow_ui.py's)."""

from __future__ import annotations

from pathlib import Path

from openlineage.client.serde import Serde

from spark_jobs.settings import PROJECT_ROOT, Settings
from tidemark_airflow.lineage import delta_name, job_lineage, kafka_namespace, postgres_name, schema_facet

COMMITTED = {
    "topic": "web",
    "accepted": 17,
    "duplicates": 2,
    "quarantined": 1,
    "ranges": [{"pipeline": "ingest:web", "batch_id": 0, "offsets": "1:0-8,0:0-12"}],
}


def web(tmp_path: Path) -> Settings:
    """The pipeline web of the README's example, on a lake in ``tmp_path`` and a remote database."""
    pipelines = tmp_path / "pipelines.yaml"
    example = (PROJECT_ROOT / "docs" / "examples" / "web-pipeline.yaml").read_text()
    pipelines.write_text((PROJECT_ROOT / "pipelines.yaml").read_text().rstrip("\n") + "\n" + example)
    env = {
        "TIDEMARK_PIPELINES": str(pipelines),
        "TIDEMARK_LAKE_ROOT": str(tmp_path / "lake"),
        "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": "b1.example.com:9093,b2.example.com:9093",
        "TIDEMARK_POSTGRES_DSN": "host=db.example.com port=6432 dbname=tidemark user=tidemark_pipeline",
    }
    settings = Settings.from_env(env)
    return settings.for_pipeline(settings.declared("web"))


def test_an_ingest_reads_its_topics_offsets_and_writes_its_tables_with_their_rows(tmp_path: Path) -> None:
    lineage = job_lineage("ingest", web(tmp_path), COMMITTED)
    [topic] = lineage.inputs
    assert (topic.namespace, topic.name) == ("kafka://b1.example.com:9093", "web")
    offsets = topic.inputFacets["tidemark_offsetRanges"].ranges
    assert offsets == [{"partition": 0, "start": 0, "end": 12}, {"partition": 1, "start": 0, "end": 8}]
    outputs = {o.name: o for o in lineage.outputs}
    lake = tmp_path / "lake" / "web"
    assert set(outputs) == {str(lake / t) for t in ("events", "duplicates", "quarantine", "sessions")} | {
        "tidemark.web.sessions"
    }
    rows = {Path(n).name: o.outputFacets["outputStatistics"].rowCount for n, o in outputs.items() if o.outputFacets}
    assert rows == {"events": 17, "duplicates": 2, "quarantine": 1}
    assert outputs["tidemark.web.sessions"].namespace == "postgres://db.example.com:6432"
    events = [f.name for f in outputs[str(lake / "events")].facets["schema"].fields]
    assert events[:3] == ["topic", "partition", "offset"] and "properties" in events
    # The event as OpenLineage's client sends it: every facet serialises with its producer and schema URL.
    text = Serde.to_json(lineage.inputs[0])
    assert '"tidemark_offsetRanges"' in text and '"_schemaURL"' in text


def test_a_reconcile_run_says_its_verdict_on_the_datasets_it_checked(tmp_path: Path) -> None:
    verdict = ("mismatch", "report", "alert", 14, True, 1)
    lineage = job_lineage("reconcile", web(tmp_path), verdict=verdict)
    assert lineage.outputs == []
    assert {i.name for i in lineage.inputs} >= {"web", "tidemark.web.sessions"}
    for dataset in lineage.inputs:
        [check] = dataset.inputFacets["dataQualityAssertions"].assertions
        assert (check.assertion, check.success) == ("tidemark_reconcile", False)
    run = lineage.run_facets["tidemark_reconcile"]
    assert (run.status, run.ranges_checked, run.used_spark) == ("mismatch", 14, True)


def test_names_follow_openlineages_conventions() -> None:
    assert kafka_namespace("SASL_SSL://b1:9094, b2:9094") == "kafka://b1:9094"
    assert delta_name("s3a://bucket/tidemark/lake/web/events") == ("s3://bucket", "tidemark/lake/web/events")
    assert delta_name("/data/lake/events") == ("file", "/data/lake/events")
    assert postgres_name("host=db port=5432 dbname=tidemark", "public", "sessions") == (
        "postgres://db:5432",
        "tidemark.public.sessions",
    )
    fields = schema_facet("a string, revenue decimal(18,2), n int").fields
    assert fields is not None
    assert [(f.name, f.type) for f in fields] == [("a", "string"), ("revenue", "decimal(18,2)"), ("n", "int")]
