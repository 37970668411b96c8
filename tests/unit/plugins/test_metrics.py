"""The metrics a Prometheus scrape reads, from the state the database holds (no server, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 21, 8, tzinfo=UTC)


def test_the_metrics_say_each_pipelines_state_in_prometheus_text_format() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition

    events = State(
        totals=[("ingest:events", "events", 3, 600, 540, 30, 30, T0), ("backfill:events", "events", 1, 9, 9, 0, 0, T0)],
        lag=[("events", 0, 40, 120.0)],
        verdict=("r2", "mismatch", T0 + timedelta(hours=1)),
        open_findings={"range": 2},
        lost={("events", 1): 120},
    )
    web = State(totals=[("ingest:web", "web", 1, 5, 5, 0, 0, T0)], lag=[("web", 0, 0, 0.0)],
                verdict=("w1", "ok", T0), open_findings={}, lost={}, pipeline="web")  # fmt: skip
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition([events, web]).decode())
        for s in family.samples
    }
    ingest = (("pipeline", "events"), ("run", "ingest"), ("topic", "events"))
    assert samples[("tidemark_records_total", (("outcome", "quarantined"), *ingest))] == 30
    assert samples[("tidemark_records_total", (("outcome", "read"), *ingest))] == 600
    assert samples[("tidemark_batches_total", ingest)] == 3
    assert samples[("tidemark_batches_total", (("pipeline", "events"), ("run", "backfill"), ("topic", "events")))] == 1
    assert samples[("tidemark_last_batch_timestamp_seconds", ingest)] == T0.timestamp()
    assert samples[("tidemark_lag_records", (("partition", "0"), ("pipeline", "events"), ("topic", "events")))] == 40
    assert samples[("tidemark_open_findings", (("kind", "range"), ("pipeline", "events")))] == 2
    assert samples[("tidemark_open_findings", (("kind", "gap"), ("pipeline", "events")))] == 0
    assert samples[("tidemark_verdict", (("pipeline", "events"), ("status", "mismatch")))] == 1
    assert samples[("tidemark_verdict", (("pipeline", "events"), ("status", "ok")))] == 0
    assert (
        samples[("tidemark_lost_offsets_total", (("partition", "1"), ("pipeline", "events"), ("topic", "events")))]
        == 120
    )
    # Each pipeline's series are its own.
    assert samples[("tidemark_verdict", (("pipeline", "web"), ("status", "ok")))] == 1
    assert samples[("tidemark_records_total", (("outcome", "read"), ("pipeline", "web"), ("run", "ingest"),
                                                ("topic", "web")))] == 5  # fmt: skip
    assert samples[("tidemark_open_findings", (("kind", "range"), ("pipeline", "web")))] == 0
    # A partition that lost nothing has its series at 0, so increase() and an alert on it work from the start.
    lost = {labels: v for (name, labels), v in samples.items() if name == "tidemark_lost_offsets_total"}
    assert lost == {
        (("partition", "0"), ("pipeline", "events"), ("topic", "events")): 0,
        (("partition", "1"), ("pipeline", "events"), ("topic", "events")): 120,
        (("partition", "0"), ("pipeline", "web"), ("topic", "web")): 0,
    }


def test_the_metrics_say_what_is_quarantined_now_per_reason() -> None:
    """Net of what readmits brought back, as ``tidemark quarantine`` and the page say: an alert on a
    reason that grows, and a readmit seen to empty it."""
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition

    state = State(totals=[], lag=[], verdict=None, open_findings={}, lost={},
                  quarantined={"invalid_json": 3, 'schema: enum at /event: "x"': 12})  # fmt: skip
    families = {f.name: f for f in text_string_to_metric_families(exposition([state]).decode())}
    family = families["tidemark_quarantined_records"]
    assert family.type == "gauge" and "net of readmits" in family.documentation
    assert {s.labels["reason"]: s.value for s in family.samples} == {
        "invalid_json": 3,
        'schema: enum at /event: "x"': 12,
    }
    assert {s.labels["pipeline"] for s in family.samples} == {"events"}


def test_records_are_counted_by_the_runs_that_land_them_and_readmits_and_repairs_only_as_batches() -> None:
    """A readmit's or a repair's batch reads records a record table holds already: counting them among
    ``tidemark_records_total`` would count the same records twice."""
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition

    state = State(
        totals=[("ingest:events", "events", 2, 50, 45, 0, 5, T0), ("readmit:events", "events", 1, 40, 5, 0, 35, T0),
                ("repair:events", "events", 1, 30, 30, 0, 0, T0)],
        lag=[], verdict=None, open_findings={}, lost={},
    )  # fmt: skip
    families = {f.name: f for f in text_string_to_metric_families(exposition([state]).decode())}
    records = {(s.labels["run"], s.labels["outcome"]): s.value for s in families["tidemark_records"].samples}
    assert {run for run, _ in records} == {"ingest"} and records[("ingest", "read")] == 50
    assert "scheduled runs and backfills" in families["tidemark_records"].documentation
    batches = {s.labels["run"]: s.value for s in families["tidemark_batches"].samples}
    assert batches == {"ingest": 2, "readmit": 1, "repair": 1}


def test_the_metrics_say_whether_the_pipelines_file_and_each_entry_have_problems() -> None:
    """``tidemark_config_ok`` as Prometheus' own ``prometheus_config_last_reload_successful``; a pipeline whose entry
    is broken keeps its series (an alert on the age of its last run fires) beside its problem count."""
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition, failed_state
    from tidemark_airflow.pipelines import Unrunnable

    good = State(totals=[], lag=[], verdict=None, open_findings={}, lost={}, pipeline="events")
    broken = State(totals=[], lag=[], verdict=None, open_findings={}, lost={}, pipeline="orders",
                   last_runs=[("ingest:orders", "orders", T0)], problems=("one", "two"))  # fmt: skip
    unread = failed_state(Unrunnable("web", "web", ("three",)), RuntimeError("not migrated"))

    def families(*states, problems=()) -> dict:
        return {f.name: f for f in text_string_to_metric_families(exposition(list(states), problems).decode())}

    found = families(good, broken, unread, problems=["one", "two", "three"])
    assert [s.value for s in found["tidemark_config_ok"].samples] == [0.0]
    assert {s.labels["pipeline"]: s.value for s in found["tidemark_pipeline_problems"].samples} == {
        "events": 0.0, "orders": 2.0, "web": 1.0
    }  # fmt: skip
    assert [(s.labels["pipeline"], s.value) for s in found["tidemark_last_run_timestamp_seconds"].samples] == [
        ("orders", T0.timestamp())
    ]
    assert [s.value for s in families(good)["tidemark_config_ok"].samples] == [1.0]
