"""tidemark's state as Prometheus metrics, served by the tidemark page at ``/tidemark/metrics``.

Read from the tidemark database at each scrape (a few small aggregates of each pipeline's schema),
written with the Prometheus client library in its text format. Every series has the label
``pipeline`` (the pipelines file's name); per pipeline, topic and partition:

* ``tidemark_lag_records`` / ``tidemark_lag_seconds``: how far the sinks were behind Kafka at the
  latest sample, which each reconcile run and each scheduled ingest run takes (offsets not
  processed yet; seconds since the oldest arrived);
* ``tidemark_records_total{run=ingest|backfill, outcome=read|accepted|duplicate|quarantined}``: the
  records committed batches of scheduled runs and of backfills read (``increase()`` gives per run or
  per hour); a readmit's or a repair's batch reads records a table holds already, and is counted in
  ``tidemark_batches_total{run}`` only, beside every other batch;
* ``tidemark_last_batch_timestamp_seconds``: when the pipeline last committed a batch;
* ``tidemark_last_run_timestamp_seconds``: when an ingest or backfill run of the pipeline last
  finished, with or without new records (alert when it is too old: the pipeline stopped running);
* ``tidemark_open_findings{kind}``: findings no check or operator has closed;
* ``tidemark_verdict{status}`` (1 for the latest run's status) and
  ``tidemark_verdict_timestamp_seconds``: the latest reconcile verdict and when it was counted;
* ``tidemark_quarantined_records{reason}``: records in quarantine now (net of readmits);
* ``tidemark_lost_offsets_total``: offsets acknowledged as lost to retention (0 for a partition
  that lost none).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

STATUSES = ("ok", "mismatch", "lagging")
FINDING_KINDS = ("range", "gap", "sessions_sinks", "sessions_events")
OUTCOMES = ("read", "accepted", "duplicate", "quarantined")
# The runs whose batches read records from Kafka for the first time (a backfill of a processed range reads
# them again, as the user asked); readmits and repairs read what the tables hold.
LANDING_RUNS = ("ingest", "backfill")


@dataclass(frozen=True)
class State:
    """What the metrics say of one pipeline, as read from its schema."""

    totals: list[tuple]  # pipeline, topic, batches, read, accepted, duplicates, quarantined, last commit
    lag: list[tuple]  # topic, partition, behind records, behind seconds
    verdict: tuple | None  # run_id, status, counted_at
    open_findings: dict[str, int]
    lost: dict[tuple[str, int], int]  # (topic, partition) -> offsets
    last_runs: list[tuple] = ()  # ledger pipeline, topic, when its latest run finished
    pipeline: str = "events"  # the pipelines file's name
    quarantined: dict[str, int] = field(default_factory=dict)  # reason -> records still quarantined


def read_state(cur, pipeline) -> State:  # psycopg2 cursor on the schema of the Pipeline
    from spark_jobs import ledger, quarantine, retention, runs
    from spark_jobs.reconcile import history

    return State(
        ledger.pipeline_totals(cur),
        history.latest_lag(cur),
        history.latest_verdict(cur),
        history.open_findings_by_kind(cur),
        retention.lost_per_partition(cur),
        runs.last_finished(cur),
        pipeline.name,
        {t.reason: t.records for t in quarantine.totals(cur)},
    )


def run_kind(ledger_pipeline: str) -> str:
    """``ingest``, ``backfill``, ``readmit`` or ``repair``: the kind of run a ledger pipeline (``ingest:<topic>``,
    ...) records."""
    return ledger_pipeline.split(":", 1)[0]


class StateCollector:
    """A Prometheus collector of the :class:`State` of each pipeline."""

    def __init__(self, states: list[State]) -> None:
        self.states = states

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        records = CounterMetricFamily(
            "tidemark_records",
            "Records read by the committed batches of scheduled runs and backfills, by outcome (readmits and "
            "repairs re-read stored records: see tidemark_batches_total)",
            labels=["pipeline", "topic", "run", "outcome"],
        )
        batches = CounterMetricFamily("tidemark_batches", "Committed batches", labels=["pipeline", "topic", "run"])
        last = GaugeMetricFamily(
            "tidemark_last_batch_timestamp_seconds",
            "When the pipeline last committed a batch",
            labels=["pipeline", "topic", "run"],
        )
        finished = GaugeMetricFamily(
            "tidemark_last_run_timestamp_seconds",
            "When an ingest or backfill run of the pipeline last finished",
            labels=["pipeline", "topic", "run"],
        )
        lag_records = GaugeMetricFamily(
            "tidemark_lag_records", "Offsets Kafka holds that no batch processed yet, at the latest sample",
            labels=["pipeline", "topic", "partition"],
        )  # fmt: skip
        lag_seconds = GaugeMetricFamily(
            "tidemark_lag_seconds", "Age of the oldest record not processed yet, at the latest sample",
            labels=["pipeline", "topic", "partition"],
        )  # fmt: skip
        findings = GaugeMetricFamily("tidemark_open_findings", "Open reconcile findings", labels=["pipeline", "kind"])
        verdict = GaugeMetricFamily(
            "tidemark_verdict", "The latest reconcile run's status (1)", labels=["pipeline", "status"]
        )
        when = GaugeMetricFamily(
            "tidemark_verdict_timestamp_seconds", "When the latest reconcile run counted", labels=["pipeline"]
        )
        lost = CounterMetricFamily(
            "tidemark_lost_offsets",
            "Offsets acknowledged as lost to retention",
            labels=["pipeline", "topic", "partition"],
        )
        in_quarantine = GaugeMetricFamily(
            "tidemark_quarantined_records",
            "Records in quarantine now, per reason (net of readmits: what tidemark quarantine lists)",
            labels=["pipeline", "reason"],
        )
        for s in self.states:
            name = s.pipeline
            for reason, n in sorted(s.quarantined.items()):
                in_quarantine.add_metric([name, reason], float(n))
            for ledger_pipeline, topic, n, read, accepted, duplicates, quarantined, at in s.totals:
                labels = [name, topic, run_kind(ledger_pipeline)]
                if run_kind(ledger_pipeline) in LANDING_RUNS:
                    for outcome, value in zip(OUTCOMES, (read, accepted, duplicates, quarantined), strict=True):
                        records.add_metric([*labels, outcome], float(value))
                batches.add_metric(labels, float(n))
                last.add_metric(labels, at.timestamp())
            for ledger_pipeline, topic, at in s.last_runs:
                finished.add_metric([name, topic, run_kind(ledger_pipeline)], at.timestamp())
            for topic, partition, behind, seconds in s.lag:
                lag_records.add_metric([name, topic, str(partition)], float(behind))
                lag_seconds.add_metric([name, topic, str(partition)], float(seconds))
            for kind in sorted({*FINDING_KINDS, *s.open_findings}):
                findings.add_metric([name, kind], float(s.open_findings.get(kind, 0)))
            if s.verdict is not None:
                _, status, counted_at = s.verdict
                for each in sorted({*STATUSES, status}):
                    verdict.add_metric([name, each], 1.0 if each == status else 0.0)
                when.add_metric([name], counted_at.timestamp())
            # Every partition the pipeline reads has a series, at 0 until it loses offsets.
            partitions = {(topic, partition): 0 for topic, partition, *_ in s.lag} | dict(s.lost)
            for (topic, partition), n in sorted(partitions.items()):
                lost.add_metric([name, topic, str(partition)], float(n))
        yield from (records, batches, last, finished, lag_records, lag_seconds, findings, verdict, when, lost)
        yield in_quarantine


def exposition(states: list[State]) -> bytes:
    """The pipelines' ``states`` in Prometheus' text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(states))
    return generate_latest(registry)
