"""tidemark's state as Prometheus metrics, served by the tidemark page at ``/tidemark/metrics``.

Read from the tidemark database at each scrape (a few small aggregates), written with the
Prometheus client library in its text format. Per pipeline, topic and partition:

* ``tidemark_lag_records`` / ``tidemark_lag_seconds``: how far the sinks were behind Kafka at the
  latest sample, which each reconcile run and each scheduled ingest run takes (offsets not
  processed yet; seconds since the oldest arrived);
* ``tidemark_records_total{outcome=read|accepted|duplicate|quarantined}`` and
  ``tidemark_batches_total``: what committed batches processed (``increase()`` gives per run or
  per hour);
* ``tidemark_last_batch_timestamp_seconds``: when the pipeline last committed a batch;
* ``tidemark_last_run_timestamp_seconds``: when an ingest or backfill run of the pipeline last
  finished, with or without new records (alert when it is too old: the pipeline stopped running);
* ``tidemark_open_findings{kind}``: findings no check or operator has closed;
* ``tidemark_verdict{status}`` (1 for the latest run's status) and
  ``tidemark_verdict_timestamp_seconds``: the latest reconcile verdict and when it was counted;
* ``tidemark_lost_offsets_total``: offsets acknowledged as lost to retention.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

STATUSES = ("ok", "mismatch", "lagging")
FINDING_KINDS = ("range", "gap", "sessions_sinks", "sessions_events")
OUTCOMES = ("read", "accepted", "duplicate", "quarantined")


@dataclass(frozen=True)
class State:
    """What the metrics say, as read from the database."""

    totals: list[tuple]  # pipeline, topic, batches, read, accepted, duplicates, quarantined, last commit
    lag: list[tuple]  # topic, partition, behind records, behind seconds
    verdict: tuple | None  # run_id, status, counted_at
    open_findings: dict[str, int]
    lost: dict[tuple[str, int], int]  # (topic, partition) -> offsets
    last_runs: list[tuple] = ()  # pipeline, topic, when its latest run finished


def read_state(cur) -> State:  # psycopg2 cursor
    from spark_jobs import ledger, retention, runs
    from spark_jobs.reconcile import history

    return State(
        ledger.pipeline_totals(cur),
        history.latest_lag(cur),
        history.latest_verdict(cur),
        history.open_findings_by_kind(cur),
        retention.lost_per_partition(cur),
        runs.last_finished(cur),
    )


class StateCollector:
    """A Prometheus collector of one :class:`State`."""

    def __init__(self, state: State) -> None:
        self.state = state

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.state
        records = CounterMetricFamily(
            "tidemark_records",
            "Records committed batches processed, by outcome",
            labels=["pipeline", "topic", "outcome"],
        )
        batches = CounterMetricFamily("tidemark_batches", "Committed batches", labels=["pipeline", "topic"])
        last = GaugeMetricFamily(
            "tidemark_last_batch_timestamp_seconds",
            "When the pipeline last committed a batch",
            labels=["pipeline", "topic"],
        )
        for pipeline, topic, n, read, accepted, duplicates, quarantined, at in s.totals:
            for outcome, value in zip(OUTCOMES, (read, accepted, duplicates, quarantined), strict=True):
                records.add_metric([pipeline, topic, outcome], float(value))
            batches.add_metric([pipeline, topic], float(n))
            last.add_metric([pipeline, topic], at.timestamp())
        finished = GaugeMetricFamily(
            "tidemark_last_run_timestamp_seconds",
            "When an ingest or backfill run of the pipeline last finished",
            labels=["pipeline", "topic"],
        )
        for pipeline, topic, at in s.last_runs:
            finished.add_metric([pipeline, topic], at.timestamp())
        yield from (records, batches, last, finished)

        lag_records = GaugeMetricFamily(
            "tidemark_lag_records", "Offsets Kafka holds that no batch processed yet, at the latest sample",
            labels=["topic", "partition"],
        )  # fmt: skip
        lag_seconds = GaugeMetricFamily(
            "tidemark_lag_seconds", "Age of the oldest record not processed yet, at the latest sample",
            labels=["topic", "partition"],
        )  # fmt: skip
        for topic, partition, behind, seconds in s.lag:
            lag_records.add_metric([topic, str(partition)], float(behind))
            lag_seconds.add_metric([topic, str(partition)], float(seconds))
        yield from (lag_records, lag_seconds)

        findings = GaugeMetricFamily("tidemark_open_findings", "Open reconcile findings", labels=["kind"])
        for kind in sorted({*FINDING_KINDS, *s.open_findings}):
            findings.add_metric([kind], float(s.open_findings.get(kind, 0)))
        yield findings

        verdict = GaugeMetricFamily("tidemark_verdict", "The latest reconcile run's status (1)", labels=["status"])
        when = GaugeMetricFamily("tidemark_verdict_timestamp_seconds", "When the latest reconcile run counted")
        if s.verdict is not None:
            _, status, counted_at = s.verdict
            for name in sorted({*STATUSES, status}):
                verdict.add_metric([name], 1.0 if name == status else 0.0)
            when.add_metric([], counted_at.timestamp())
        yield from (verdict, when)

        lost = CounterMetricFamily(
            "tidemark_lost_offsets", "Offsets acknowledged as lost to retention", labels=["topic", "partition"]
        )
        for (topic, partition), n in sorted(s.lost.items()):
            lost.add_metric([topic, str(partition)], float(n))
        yield lost


def exposition(state: State) -> bytes:
    """``state`` in Prometheus' text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state))
    return generate_latest(registry)
