"""The lag the page and the metrics give is measured when they are asked, against real Kafka and PostgreSQL.

A sample a run took would say "behind 5 records, 0.0 min" for as long as ingest stays stalled; the
lag now grows with the age of the oldest record no batch processed, and a Kafka that does not answer
is said to be so within the timeout, not waited for.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from spark_jobs import ingest
from spark_jobs.offsets import ensure_topic
from spark_jobs.settings import Settings
from spark_jobs.store.runs import lag_now
from tests.integration.spark_jobs.checks import send


def test_the_lag_now_grows_while_ingest_is_stalled_and_a_silent_kafka_is_said_within_the_timeout(
    spark, fresh: Settings
) -> None:
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    events = [
        {"event_id": f"lag-{uuid.uuid4().hex[:6]}-{i}", "entity_id": "u1", "event_type": "click",
         "event_time": (t + timedelta(seconds=i)).isoformat()}
        for i in range(5)
    ]  # fmt: skip
    ensure_topic(fresh, fresh.topic, partitions=1)
    send(fresh, fresh.topic, events[:2])
    ingest.run_scheduled(spark, fresh)
    assert sum(lag.behind_records for lag in lag_now(fresh).lags) == 0

    send(fresh, fresh.topic, events[2:])  # ingest does not run again
    first = lag_now(fresh)
    time.sleep(3)
    then = lag_now(fresh)
    assert first.problem is None and then.problem is None
    assert sum(lag.behind_records for lag in first.lags) == sum(lag.behind_records for lag in then.lags) == 3
    grown = max(lag.behind_seconds for lag in then.lags) - max(lag.behind_seconds for lag in first.lags)
    assert grown >= 2.5, (first, then)
    assert then.measured_at - first.measured_at >= timedelta(seconds=3)

    started = time.monotonic()
    silent = lag_now(replace(fresh, bootstrap_servers="127.0.0.1:9"), timeout_s=2.0)  # nothing listens on 9
    assert time.monotonic() - started < 10
    assert silent.lags == [] and silent.problem is not None and silent.problem.startswith("Kafka unreachable: "), silent
