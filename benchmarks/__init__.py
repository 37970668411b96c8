"""tidemark's benchmark: the pipeline against baselines measured in the same run on the same data.

Absolute times on small shared machines are noisy, so every figure that has a target is a ratio
against a baseline taken in the same run (DESIGN.md, "Performance"; issue 5). Stages:

* **K0** (context) producing the synthetic events with confluent-kafka;
* **B1** draining the topic with a confluent-kafka consumer, ``read_committed`` (the read ceiling);
* **B2** a Structured Streaming ``AvailableNow`` raw append of the same range to Delta (the Spark
  baseline the issue names), and **B2L** (context) ``spark_jobs/land.py``, a bounded read landed
  raw by MERGE with a ledger row;
* **P1** the full ingest, ``ingest.run_scheduled``: parse, dedupe, sessionize, Delta MERGE,
  PostgreSQL upsert; P1/B2 as a throughput ratio; with its profile per batch (Spark SQL executions,
  jobs, Delta commits per table); **P1S** (``slope``, long) P1 at ``--slope-events``, for P1's
  CPU-seconds per million events from the slope between the two sizes;
* **B3** ``COPY`` of P1's session rows into an empty table with the ``sessions`` table's columns,
  constraints and indexes, against **P2** ``sinks.postgres.upsert_sessions`` with the same rows:
  cold insert, a replay where every row conflicts and nothing changes, and a batch where 10% of
  rows changed;
* **G1 / G10** a scheduled run of 10k new events against sinks holding N and 10xN sessions (the
  sinks are pre-populated directly, with the pipeline's table schemas, from a consistent synthetic
  history; the measured run is a real ``ingest.run_scheduled`` over Kafka);
* **E0 / E1 / E2** each a spark-submit of its own (a cold JVM, as a DAG's run is): a trivial job that
  starts a SparkSession and stops, a scheduled run with no new data, and a scheduled run of 2,000
  new events into a lake that holds earlier ones (E2 - E0: what a small scheduled run costs beyond
  Spark's own start); **E0A** the trivial job with tidemark's class archive (E2 - E0A: the batch's
  own cold cost);
* **H1 / H2 / HS** ``sessionize`` alone on events generated in Spark: one entity never idle for
  30 minutes over 48 h with n/2 and n events (``--hotkey-events``), against n events of 5,000
  entities; time must grow linearly (H2/H1 <= 2.3) and stay within 3x of the spread events;
* **C0 / C1 / C2** the contract check alone on ``--contract-events`` records of the produced mix (in
  Parquet, no Kafka): the Variant SQL check tidemark used before (``variant_contract``) against the
  Java check (``spark_jobs.validation``); C1 must cost no more CPU and classify no record differently;
  C2 is the same records as Avro in Confluent's framing, the ids read and decoded in the JVM against a
  real schema registry (its own, on 32081, ``benchmarks/avro_contract.py``): no more CPU than C1, and no
  record decided otherwise;
* **R** P1's range replayed with a backfill (``ingest.run_backfill``): time against P1, Delta files
  rewritten and PostgreSQL rows changed (both must be 0). It takes as long as P1, so it runs
  ``--replay-repeat`` times (default once); between repetitions the previous replay's ledger row is
  deleted so each one is a real replay rather than a ledger no-op.

The bench runs its own Kafka and PostgreSQL (ports 32092/32093/32432, state in
``.tidemark/bench``), so it never touches the demo or test stacks. It starts what is not running,
stops what it started, and gives every stage its own topic, lake, checkpoints and PostgreSQL
database (copied from a migrated template), dropped at the end unless ``--keep``.

The package: ``options`` (flags and the bench's settings), ``figures`` (medians, ratios, table, JSON),
``checks`` (the figures held to targets), ``services`` (its Kafka and PostgreSQL), ``context`` (what the
stages share, and timing), ``workloads`` (baselines and set-up), ``stages`` (the stages), ``run`` (a run
from start to end).

Run: ``make bench``, or ``python -m benchmarks`` from the checkout (the benchmarks are not part of
the installed product); ``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.options import add_arguments, bench_settings, options_from_arguments
from benchmarks.run import run_bench
from spark_jobs.errors import TidemarkError

__all__ = ["add_arguments", "main", "run_bench", "run_from_arguments"]


def run_from_arguments(args: argparse.Namespace) -> int:
    """Run the bench with parsed :func:`add_arguments` flags; 1 when ``--strict`` and a target was missed."""
    options = options_from_arguments(args)
    document = run_bench(bench_settings(options), options)
    return 1 if options.strict and document["summary"]["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks``: errors a user can fix print one line and exit with status 2."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_arguments(args)
    except (TidemarkError, ConnectionError, FileNotFoundError, ValueError) as exc:
        print(f"benchmarks: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
