"""tidemark's state as Prometheus metrics, served by the tidemark page at ``/tidemark/metrics``.

Read from the tidemark database at each scrape (a few small aggregates of each pipeline's schema),
written with the Prometheus client library in its text format. Every series has the label
``pipeline`` (the pipelines file's name); per pipeline, topic and partition:

* ``tidemark_lag_records`` / ``tidemark_lag_seconds``: how far the sinks are behind Kafka now,
  measured at each scrape (Kafka's end offsets against the furthest offsets the ledger's batches
  processed; seconds since the oldest record not processed yet arrived: it grows while ingest is
  stalled), with ``tidemark_lag_measured_timestamp_seconds``; ``tidemark_kafka_up`` is 0 when Kafka
  did not answer within 2 s, and then there is no lag series (a stale number is not given as now);
* ``tidemark_records_total{run=ingest|backfill, outcome=read|accepted|duplicate|quarantined}``: the
  records committed batches of scheduled runs and of backfills read (``increase()`` gives per run or
  per hour); a readmit's or a repair's batch reads records a table holds already, and is counted in
  ``tidemark_batches_total{run}`` only, beside every other batch;
* ``tidemark_last_batch_timestamp_seconds``: when the pipeline last committed a batch;
* ``tidemark_last_run_timestamp_seconds{run}``: when a run of the pipeline of each kind (ingest,
  backfill, readmit, repair) last finished, with or without new records (alert when the ingest's
  is too old: the pipeline stopped running);
* ``tidemark_open_findings{kind}``: findings no check or operator has closed;
* ``tidemark_verdict{status}`` (1 for the latest run's status) and
  ``tidemark_verdict_timestamp_seconds``: the latest reconcile verdict and when it was counted;
* ``tidemark_quarantined_records{reason}``: records in quarantine now (net of readmits);
* ``tidemark_lost_offsets_total``: offsets acknowledged as lost to retention (0 for a partition
  that lost none);
* ``tidemark_pipeline_problems``: the problems of the pipeline's entry in the pipelines file (0: it
  runs; more: every run of it fails until the entry is fixed), and ``tidemark_config_ok`` (no
  ``pipeline`` label): 1 when the whole file has no problem. A pipeline whose entry has a problem
  keeps its other series (read from its schema), so an alert on their age fires for it too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

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
    lag: list[tuple]  # topic, partition, behind records, behind seconds: measured now (with_lag)
    verdict: tuple | None  # run_id, status, counted_at
    open_findings: dict[str, int]
    lost: dict[tuple[str, int], int]  # (topic, partition) -> offsets
    last_runs: Sequence[tuple] = ()  # ledger pipeline, topic, when its latest run finished
    pipeline: str = "events"  # the pipelines file's name
    quarantined: dict[str, int] = field(default_factory=dict)  # reason -> records still quarantined
    problems: tuple[str, ...] = ()  # its entry's problems in the pipelines file (it cannot run)
    lag_at: datetime | None = None  # when the lag was measured (None: not measured)
    lag_problem: str | None = None  # why it could not be (Kafka unreachable, ...)


def read_state(cur, pipeline) -> State:  # psycopg2 cursor on the schema of the Pipeline
    from spark_jobs.store import history, ledger, open_findings, quarantine, retention, runs

    return State(
        ledger.pipeline_totals(cur),
        [],  # with_lag measures it now
        history.latest_verdict(cur),
        open_findings.open_findings_by_kind(cur),
        retention.lost_per_partition(cur),
        runs.last_finished(cur),
        pipeline.name,
        {t.reason: t.records for t in quarantine.totals(cur)},
        tuple(getattr(pipeline, "problems", ())),
    )


def with_lag(state: State, now) -> State:  # a runs.LagNow
    """``state`` with the lag measured ``now`` (:func:`tidemark_airflow.listing.lag_of_each`)."""
    lags = [(lag.topic, lag.partition, lag.behind_records, lag.behind_seconds) for lag in now.lags]
    return replace(state, lag=lags, lag_at=now.measured_at, lag_problem=now.problem)


def failed_state(pipeline, error: Exception) -> State:  # a Pipeline or an Unrunnable, why its schema is unread
    """The :class:`State` of a pipeline whose schema cannot be read (not migrated yet, ...): its problems only."""
    return State([], [], None, {}, {}, [], pipeline.name, {}, tuple(getattr(pipeline, "problems", ())))


def run_kind(ledger_pipeline: str) -> str:
    """``ingest``, ``backfill``, ``readmit`` or ``repair``: the kind of run a ledger pipeline (``ingest:<topic>``,
    ...) records."""
    return ledger_pipeline.split(":", 1)[0]


class StateCollector:
    """A Prometheus collector of the :class:`State` of each pipeline."""

    def __init__(self, states: list[State], file_problems: Sequence[str] = ()) -> None:
        self.states = states
        self.file_problems = file_problems

    def collect(self) -> Iterator:
        yield from self._batches()
        yield from self._lag()
        yield from self._reconcile()
        yield from self._lost()
        yield from self._quarantine()
        yield from self._measured()
        yield from self._config()

    def _batches(self) -> Iterator:
        """The committed batches' records and counts, and when the last batch and the last run of each kind were."""
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
            "When a run of the pipeline of this kind (ingest, backfill, readmit, repair) last finished",
            labels=["pipeline", "topic", "run"],
        )
        for s in self.states:
            for ledger_pipeline, topic, n, read, accepted, duplicates, quarantined, at in s.totals:
                labels = [s.pipeline, topic, run_kind(ledger_pipeline)]
                if run_kind(ledger_pipeline) in LANDING_RUNS:
                    for outcome, value in zip(OUTCOMES, (read, accepted, duplicates, quarantined), strict=True):
                        records.add_metric([*labels, outcome], float(value))
                batches.add_metric(labels, float(n))
                last.add_metric(labels, at.timestamp())
            for ledger_pipeline, topic, at in s.last_runs:
                finished.add_metric([s.pipeline, topic, run_kind(ledger_pipeline)], at.timestamp())
        yield from (records, batches, last, finished)

    def _lag(self) -> Iterator:
        """What Kafka holds that no batch processed yet, per partition: offsets and the oldest record's age."""
        from prometheus_client.core import GaugeMetricFamily

        lag_records = GaugeMetricFamily(
            "tidemark_lag_records", "Offsets Kafka holds that no batch processed yet, measured at this scrape",
            labels=["pipeline", "topic", "partition"],
        )  # fmt: skip
        lag_seconds = GaugeMetricFamily(
            "tidemark_lag_seconds", "Age of the oldest record not processed yet, measured at this scrape",
            labels=["pipeline", "topic", "partition"],
        )  # fmt: skip
        for s in self.states:
            for topic, partition, behind, seconds in s.lag:
                lag_records.add_metric([s.pipeline, topic, str(partition)], float(behind))
                lag_seconds.add_metric([s.pipeline, topic, str(partition)], float(seconds))
        yield from (lag_records, lag_seconds)

    def _reconcile(self) -> Iterator:
        """The open findings by kind, and the latest reconcile run's status and when it counted."""
        from prometheus_client.core import GaugeMetricFamily

        findings = GaugeMetricFamily("tidemark_open_findings", "Open reconcile findings", labels=["pipeline", "kind"])
        verdict = GaugeMetricFamily(
            "tidemark_verdict", "The latest reconcile run's status (1)", labels=["pipeline", "status"]
        )
        when = GaugeMetricFamily(
            "tidemark_verdict_timestamp_seconds", "When the latest reconcile run counted", labels=["pipeline"]
        )
        for s in self.states:
            for kind in sorted({*FINDING_KINDS, *s.open_findings}):
                findings.add_metric([s.pipeline, kind], float(s.open_findings.get(kind, 0)))
            if s.verdict is not None:
                _, status, counted_at = s.verdict
                for each in sorted({*STATUSES, status}):
                    verdict.add_metric([s.pipeline, each], 1.0 if each == status else 0.0)
                when.add_metric([s.pipeline], counted_at.timestamp())
        yield from (findings, verdict, when)

    def _lost(self) -> Iterator:
        """The offsets acknowledged as lost to retention, per partition."""
        from prometheus_client.core import CounterMetricFamily

        lost = CounterMetricFamily(
            "tidemark_lost_offsets",
            "Offsets acknowledged as lost to retention",
            labels=["pipeline", "topic", "partition"],
        )
        for s in self.states:
            # Every partition the pipeline reads has a series, at 0 until it loses offsets.
            partitions = {(topic, partition): 0 for topic, partition, *_ in s.lag} | dict(s.lost)
            for (topic, partition), n in sorted(partitions.items()):
                lost.add_metric([s.pipeline, topic, str(partition)], float(n))
        yield lost

    def _quarantine(self) -> Iterator:
        """The records in quarantine now, per reason."""
        from prometheus_client.core import GaugeMetricFamily

        in_quarantine = GaugeMetricFamily(
            "tidemark_quarantined_records",
            "Records in quarantine now, per reason (net of readmits: what tidemark quarantine lists)",
            labels=["pipeline", "reason"],
        )
        for s in self.states:
            for reason, n in sorted(s.quarantined.items()):
                in_quarantine.add_metric([s.pipeline, reason], float(n))
        yield in_quarantine

    def _measured(self) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily(
            "tidemark_kafka_up", "1 when Kafka answered this scrape's lag measurement within 2 s", labels=["pipeline"]
        )
        at = GaugeMetricFamily(
            "tidemark_lag_measured_timestamp_seconds", "When the lag series were measured", labels=["pipeline"]
        )
        for s in self.states:
            if s.lag_at is not None and not s.problems:  # a pipeline that cannot run is not measured
                up.add_metric([s.pipeline], 0.0 if s.lag_problem else 1.0)
                if not s.lag_problem:
                    at.add_metric([s.pipeline], s.lag_at.timestamp())
        yield from (up, at)

    def _config(self) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        problems = GaugeMetricFamily(
            "tidemark_pipeline_problems",
            "Problems of the pipeline's entry in the pipelines file (0: it runs; more: its runs fail till fixed)",
            labels=["pipeline"],
        )
        for s in self.states:
            problems.add_metric([s.pipeline], float(len(s.problems)))
        ok = GaugeMetricFamily("tidemark_config_ok", "1 when the pipelines file has no problem, else 0")
        ok.add_metric([], 0.0 if self.file_problems else 1.0)
        yield from (problems, ok)


def exposition(states: list[State], file_problems: Sequence[str] = ()) -> bytes:
    """The pipelines' ``states`` and the pipelines file's problems in Prometheus' text format."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(states, file_problems))
    return generate_latest(registry)


def scrape(settings, allowed) -> bytes:  # Settings, Callable[[str], bool]
    """The metrics of the pipelines ``allowed`` says, with the lag measured now."""
    from tidemark_airflow.listing import lag_of_each, listed, readable
    from tidemark_airflow.pipelines_list import each_pipeline

    listing = readable(listed(settings), allowed)
    states = each_pipeline(settings, read_state, failed_state, listing)
    lags = lag_of_each(settings, listing)
    return exposition([with_lag(s, lags[s.pipeline]) for s in states], listing.problems)
