"""What a bench run is asked to do: its options, its command-line flags, and its own settings.

The bench never shares services or state with the demo or test stacks: :func:`bench_settings`
gives it its own ports and home, and takes only the jar cache and the Spark tuning from the
user's configuration.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs.settings import PROJECT_ROOT, Settings
from tidemark.options import fraction, non_negative, positive

STAGES = (
    "b1", "b2", "b2l", "peer", "p1", "slope", "batchcost", "replay", "empty", "pg", "growth", "hotkey", "contract",
    "floor", "soak", "catchup", "collector",
)  # fmt: skip
STAGE_HELP = {
    "b1": "confluent-kafka drain of the topic",
    "b2": "Spark AvailableNow raw append to Delta, the Spark baseline",
    "b2l": "Spark raw landing with land.py (context)",
    "peer": "the pipeline a user writes from the docs: from_json, MERGE dedupe, window sessions, PG upsert",
    "p1": "full ingest (ingest.run_scheduled)",
    "slope": "P1 again at --slope-events: CPU-seconds per million events from the slope between the two sizes",
    "replay": "backfill of P1's range: time, Delta files rewritten, PostgreSQL rows changed",
    "empty": "scheduled run with no new data vs trivial spark-submit",
    "pg": "COPY vs sinks.postgres.upsert_sessions: cold, replay, 10%% changed",
    "growth": "10k new events against sinks with N and 10xN sessions, then a reconcile of each",
    "hotkey": "sessionize one entity that is never idle (n/2 and n events over 48 h) vs n events of 5,000 entities",
    "contract": "the contract check alone: the Java check vs the Variant SQL check it replaced, same records",
    "floor": "Delta's own Spark SQL executions for the four operations each batch keeps: a batch's floor (counts)",
    "soak": "many small scheduled runs into one sink with maintenance between: are the last runs as fast as the first?",
    "batchcost": "P1's topic at three caps: a batch's fixed writer seconds and seconds per million (a line's fit)",
    "catchup": "a backlog of --catchup-events in --catchup-batches batches, sessions open throughout: last vs first",
    "collector": "cold scheduled runs (spark-submit) at each of --gc-sizes with G1 and with ParallelGC, alternated",
}
# Stages `make bench` leaves out (they take long): `make bench-long` runs them.
LONG_STAGES = ("slope", "soak", "catchup", "collector")
DEFAULT_STAGES = tuple(s for s in STAGES if s not in LONG_STAGES)
# Below Linux's ephemeral range (32768-60999): a port inside it can be held for a moment by any client's
# outgoing connection, and was (35432, as a test run's services closed, the bench's PostgreSQL could not bind).
BENCH_KAFKA_PORT = 32092
BENCH_KAFKA_CONTROLLER_PORT = 32093
BENCH_POSTGRES_PORT = 32432
BENCH_SCHEMA_REGISTRY_PORT = 32081  # the contract stage's Avro row (C2) starts it
# The user's settings the bench keeps: where `make jars` put the jars, and how Spark is sized.
# Everything else (services, lake, checkpoints, topic, session rules) is the bench's own.
SHARED_SETTINGS = (
    "jars_dir", "spark_master", "shuffle_partitions", "driver_memory", "spark_ui", "spark_log_level",
    "continue_sessions",
)  # fmt: skip


def default_home() -> Path:
    """``.tidemark/bench`` in the checkout (an editable install), else under the working directory."""
    root = PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").exists() else Path.cwd()
    return root / ".tidemark" / "bench"


def parse_stages(text: str) -> tuple[str, ...]:
    """``"p1,b2"`` -> the named stages in run order; ``all`` for every stage."""
    names = [s.strip().lower() for s in text.split(",") if s.strip()]
    if not names or names == ["all"]:
        return STAGES
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    return tuple(s for s in STAGES if s in names)


@dataclass(frozen=True)
class BenchOptions:
    """One run's sizes, repetitions, stages, ports and output; counts are at least 1."""

    events: int = 100_000
    repeat: int = 3
    warmup: int = 1
    pg_repeat: int = 5
    replay_repeat: int = 1
    stages: tuple[str, ...] = DEFAULT_STAGES
    entities: int = 5_000
    duplicate_rate: float = 0.01
    late_rate: float = 0.02
    malformed_rate: float = 0.005
    partitions: int = 3
    seed: int = 7
    max_offsets_per_trigger: int | None = None
    growth_sessions: int = 10_000
    growth_events: int = 10_000
    hotkey_events: int = 1_000_000
    soak_batches: int = 500
    soak_events: int = 2_000
    slope_events: int = 100_000
    contract_events: int = 200_000
    catchup_events: int = 4_000_000
    catchup_batches: int = 16
    gc_sizes: tuple[int, ...] = (100_000, 300_000, 1_000_000)
    soak_maintenance_every: int = 100
    home: Path = field(default_factory=default_home)
    output: Path | None = None  # default: <home>/results.json
    kafka_port: int = BENCH_KAFKA_PORT
    kafka_controller_port: int = BENCH_KAFKA_CONTROLLER_PORT
    postgres_port: int = BENCH_POSTGRES_PORT
    keep: bool = False
    strict: bool = False

    def __post_init__(self) -> None:
        for name in (
            "events",
            "repeat",
            "pg_repeat",
            "replay_repeat",
            "entities",
            "partitions",
            "growth_sessions",
            "growth_events",
            "hotkey_events",
            "soak_batches",
            "soak_events",
            "slope_events",
            "contract_events",
            "catchup_events",
            "catchup_batches",
            "soak_maintenance_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.gc_sizes or min(self.gc_sizes) < 1:
            raise ValueError(f"gc_sizes must be positive sizes, got {self.gc_sizes}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be 0 or more, got {self.warmup}")


def sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive sizes (argparse type): ``100000,300000``."""
    return tuple(positive(part.strip()) for part in text.split(","))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench's command-line flags."""
    d = BenchOptions()
    _what_to_run(parser, d)
    _produced_events(parser, d)
    _stage_sizes(parser, d)
    _long_stage_sizes(parser, d)
    _where_it_runs(parser, d)


def _what_to_run(parser: argparse.ArgumentParser, d: BenchOptions) -> None:
    """The events of the main topic, the repetitions, and the stages."""
    stages = "; ".join(f"{k}: {v}" for k, v in STAGE_HELP.items())
    parser.add_argument(
        "--events",
        type=positive,
        default=d.events,
        help=f"synthetic events produced for B1, B2, P1, replay (default {d.events:,})",
    )
    parser.add_argument(
        "--repeat",
        type=positive,
        default=d.repeat,
        help=f"repetitions of each stage; figures are medians (default {d.repeat})",
    )
    parser.add_argument(
        "--warmup",
        type=non_negative,
        default=d.warmup,
        help=f"repetitions of B2L, B2, PEER and P1 run first and not counted (default {d.warmup})",
    )
    parser.add_argument(
        "--pg-repeat",
        type=positive,
        default=None,
        help=f"repetitions of the short PostgreSQL stages (default max(--repeat, {d.pg_repeat}))",
    )
    parser.add_argument(
        "--replay-repeat",
        type=positive,
        default=d.replay_repeat,
        help=f"repetitions of the replay, as long as P1; its targets are counts (default {d.replay_repeat})",
    )
    parser.add_argument(
        "--stages", type=parse_stages, default=d.stages, help=f"comma-separated subset to run (default all). {stages}"
    )


def _produced_events(parser: argparse.ArgumentParser, d: BenchOptions) -> None:
    """What the produced events are like, and how many records a batch reads at most."""
    parser.add_argument(
        "--entities",
        type=positive,
        default=d.entities,
        help=f"distinct entity_ids in the produced events (default {d.entities:,})",
    )
    parser.add_argument("--duplicate-rate", type=fraction, default=d.duplicate_rate)
    parser.add_argument("--late-rate", type=fraction, default=d.late_rate)
    parser.add_argument("--malformed-rate", type=fraction, default=d.malformed_rate)
    parser.add_argument("--partitions", type=positive, default=d.partitions, help="partitions of the bench topics")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=positive,
        default=None,
        help="records per batch at most, the same for B2, PEER and P1 (default: TIDEMARK_MAX_OFFSETS_PER_TRIGGER, "
        "as `tidemark ingest`)",
    )


def _stage_sizes(parser: argparse.ArgumentParser, d: BenchOptions) -> None:
    """The sizes of the growth, hot key, soak, slope and contract stages."""
    parser.add_argument(
        "--growth-sessions",
        type=positive,
        default=d.growth_sessions,
        help=f"N, sessions in the smaller growth sink (default {d.growth_sessions:,})",
    )
    parser.add_argument(
        "--growth-events",
        type=positive,
        default=d.growth_events,
        help=f"new events in each growth run (default {d.growth_events:,})",
    )
    parser.add_argument(
        "--hotkey-events",
        type=positive,
        default=d.hotkey_events,
        help=f"n, events of the hot entity in the hotkey stage (default {d.hotkey_events:,})",
    )
    parser.add_argument(
        "--soak-batches", type=positive, default=d.soak_batches, help=f"soak: scheduled runs (default {d.soak_batches})"
    )
    parser.add_argument(
        "--slope-events",
        type=positive,
        default=d.slope_events,
        help=f"slope: the second size P1 runs at (default {d.slope_events:,}; `make bench-long` runs P1 at 1,000,000)",
    )
    parser.add_argument(
        "--contract-events",
        type=positive,
        default=d.contract_events,
        help=f"contract: records of the produced mix checked in memory, no Kafka (default {d.contract_events:,})",
    )
    parser.add_argument(
        "--catchup-events",
        type=positive,
        default=d.catchup_events,
        help=f"catchup: events of the backlog (default {d.catchup_events:,})",
    )
    parser.add_argument(
        "--catchup-batches",
        type=positive,
        default=d.catchup_batches,
        help=f"catchup: batches the backlog is read in (default {d.catchup_batches})",
    )
    parser.add_argument(
        "--soak-events",
        type=positive,
        default=d.soak_events,
        help=f"soak: new events before each run (default {d.soak_events:,})",
    )
    parser.add_argument(
        "--soak-maintenance-every",
        type=positive,
        default=d.soak_maintenance_every,
        help=f"soak: the maintenance DAG's work after every this many runs (default {d.soak_maintenance_every})",
    )


def _long_stage_sizes(parser: argparse.ArgumentParser, d: BenchOptions) -> None:
    """The sizes of the stages only `make bench-long` runs, beyond those above."""
    parser.add_argument(
        "--gc-sizes",
        type=sizes,
        default=d.gc_sizes,
        help=f"collector: the run sizes, comma-separated (default {','.join(str(n) for n in d.gc_sizes)})",
    )


def _where_it_runs(parser: argparse.ArgumentParser, d: BenchOptions) -> None:
    """The bench's state folder, results file and ports, and what it keeps and how it exits."""
    parser.add_argument(
        "--home", type=Path, default=None, help="the bench's state folder (default .tidemark/bench in the checkout)"
    )
    parser.add_argument("--output", type=Path, default=None, help="JSON results file (default <home>/results.json)")
    parser.add_argument("--kafka-port", type=positive, default=d.kafka_port)
    parser.add_argument("--kafka-controller-port", type=positive, default=d.kafka_controller_port)
    parser.add_argument("--postgres-port", type=positive, default=d.postgres_port)
    parser.add_argument("--keep", action="store_true", help="keep the run's topics, lakes and databases")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a target is missed")


def options_from_arguments(args: argparse.Namespace) -> BenchOptions:
    """The options of parsed :func:`add_arguments` flags, defaults filled in."""
    d = BenchOptions()
    return BenchOptions(
        events=args.events,
        repeat=args.repeat,
        warmup=args.warmup,
        pg_repeat=args.pg_repeat or max(args.repeat, d.pg_repeat),
        replay_repeat=args.replay_repeat,
        stages=args.stages,
        entities=args.entities,
        duplicate_rate=args.duplicate_rate,
        late_rate=args.late_rate,
        malformed_rate=args.malformed_rate,
        partitions=args.partitions,
        seed=args.seed,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        growth_sessions=args.growth_sessions,
        growth_events=args.growth_events,
        hotkey_events=args.hotkey_events,
        soak_batches=args.soak_batches,
        soak_events=args.soak_events,
        slope_events=args.slope_events,
        contract_events=args.contract_events,
        catchup_events=args.catchup_events,
        catchup_batches=args.catchup_batches,
        gc_sizes=args.gc_sizes,
        soak_maintenance_every=args.soak_maintenance_every,
        home=args.home or d.home,
        output=args.output,
        kafka_port=args.kafka_port,
        kafka_controller_port=args.kafka_controller_port,
        postgres_port=args.postgres_port,
        keep=args.keep,
        strict=args.strict,
    )


def bench_settings(options: BenchOptions, env: Mapping[str, str] | None = None) -> Settings:
    """The bench's own services and state; only the jars and the Spark tuning come from ``env``.

    ``env`` (default: this process's environment) is read as ``Settings.from_env`` reads it.
    """
    user = Settings.from_env(os.environ if env is None else env)
    # Built, not replace()d from the user's settings: the addresses, lake and checkpoints are
    # derived from home and the ports in __post_init__, so they must start empty.
    return Settings(
        home=options.home,
        kafka_port=options.kafka_port,
        kafka_controller_port=options.kafka_controller_port,
        postgres_port=options.postgres_port,
        schema_registry_port=BENCH_SCHEMA_REGISTRY_PORT,
        **{name: getattr(user, name) for name in SHARED_SETTINGS},
    )
