"""What the stages of one bench run share: settings and options, the services, the Spark session,
the produced main topic, the sink that ingested it, and the measurements with their CPU cost.

Each stage is a function of a :class:`BenchContext`; a stage gives every workload its own
:class:`Sink` (lake, checkpoints, PostgreSQL database, topic) so no stage sees another's data.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from benchmarks.figures import Measurement, per_second
from benchmarks.options import BenchOptions
from benchmarks.services import BenchServices
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.contract import SessionRules
    from spark_jobs.offsets import PartitionRange
    from tidemark.producer import ProduceReport

T = TypeVar("T")


def ensure(condition: bool, message: str) -> None:
    """Stop the run when a workload did not do what it is measured for (a wrong count is no figure)."""
    if not condition:
        raise RuntimeError(f"bench: {message}")


def session_rules(settings: Settings) -> SessionRules:
    """The rules the bench cuts sessions with: the settings' (the bench's sinks cut sessions)."""
    if settings.session_rules is None:
        raise RuntimeError("bench: the bench cuts sessions, but the settings' session gap is off")
    return settings.session_rules


class CpuMeter:
    """CPU seconds used so far by this process tree (Python, Spark's JVM, its Python workers, any
    spark-submit) and by the Kafka and PostgreSQL servers; reaped children included."""

    def __init__(self, service_pids: Callable[[], list[int]]) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._service_pids = service_pids

    def _times(self, proc) -> float:  # psutil.Process
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def _tree(self, root, skip: set[int]) -> float:
        psutil = self._psutil
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        skipped: set[int] = set()
        for proc in procs:
            if proc.pid in skip:
                skipped.add(proc.pid)
                with contextlib.suppress(psutil.NoSuchProcess):
                    skipped.update(child.pid for child in proc.children(recursive=True))
        total = 0.0
        for proc in procs:
            if proc.pid in skipped:
                continue
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                total += self._times(proc)
        return total

    def snapshot(self) -> tuple[float, float]:
        """(this process tree, the services), in CPU seconds."""
        services = [pid for pid in self._service_pids() if pid]
        client = self._tree(self._me, set(services))
        service_total = 0.0
        for pid in services:
            with contextlib.suppress(self._psutil.NoSuchProcess):
                service_total += self._tree(self._psutil.Process(pid), set())
        return client, service_total


class Recorder:
    """The run's measurements, in the order they were first named, and its progress lines."""

    def __init__(self, cpu: CpuMeter, stream: TextIO | None = None) -> None:
        self.measurements: dict[str, Measurement] = {}
        self._cpu = cpu
        self._stream = stream or sys.stderr
        self._t0 = time.monotonic()

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self._t0

    def progress(self, message: str) -> None:
        print(f"[bench {self.elapsed:7.1f}s] {message}", file=self._stream, flush=True)

    def measurement(self, key: str, label: str, count: int, unit: str = "events") -> Measurement:
        """The measurement ``key``, made on first use."""
        if key not in self.measurements:
            self.measurements[key] = Measurement(key, label, count, unit)
        return self.measurements[key]

    def measure(self, m: Measurement, fn: Callable[[], T], note: Callable[[T], str] | None = None) -> T:
        """Run ``fn`` once, recording its wall time and CPU time in ``m``; returns what ``fn`` returned."""
        client0, services0 = self._cpu.snapshot()
        started = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - started
        client1, services1 = self._cpu.snapshot()
        m.add(elapsed, client1 - client0, services1 - services0)
        rate = per_second(m.count, elapsed)
        extra = f", {rate:,.0f} {m.unit}/s" if rate else ""
        suffix = f" ({note(result)})" if note else ""
        self.progress(f"{m.key} {m.label}: repetition {len(m.seconds)}: {elapsed:.2f} s{extra}{suffix}")
        return result


@dataclass(frozen=True)
class Sink:
    """One workload's own lake, checkpoints, PostgreSQL database and topic (in ``settings``)."""

    name: str
    settings: Settings
    database: str
    root: Path


@dataclass(frozen=True)
class MainTopic:
    """The topic K0 produced: B1, B2, B2L, P1 and the replay all read exactly these ranges."""

    name: str
    ranges: list[PartitionRange]
    committed: int


@dataclass
class BenchContext:
    """The state the stages share; the run fills in ``session``, the stages ``main_topic`` and ``ingested``."""

    settings: Settings
    options: BenchOptions
    services: BenchServices
    record: Recorder
    work: Path  # this run's lakes, checkpoints and scratch files
    session: SparkSession | None = None  # started by benchmarks.run.start, before any stage
    main_topic: MainTopic | None = None  # produced by K0 (benchmarks.stages.produce_main)
    ingested: Sink | None = None  # a sink that processed the main topic (P1's last)
    meta: dict[str, Any] = field(default_factory=dict)  # extra top-level fields of the JSON document

    @property
    def run_id(self) -> str:
        return self.services.run_id

    @property
    def spark(self) -> SparkSession:
        """The run's Spark session: every stage runs after the run started it."""
        if self.session is None:
            raise RuntimeError("bench: no Spark session (a stage ran before benchmarks.run.start)")
        return self.session

    @property
    def main(self) -> MainTopic:
        """The main topic: the stages that read it run after K0 produced it."""
        if self.main_topic is None:
            raise RuntimeError("bench: no main topic (a stage that reads it ran before K0)")
        return self.main_topic

    def new_sink(self, name: str, topic: str, template: str | None = None, lake_from: Path | None = None) -> Sink:
        """A fresh sink under ``work/name`` reading ``topic``: a database copied from ``template`` (default
        the migrated template) and an empty lake, or a copy of ``lake_from``."""
        root = self.work / name
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        lake = root / "lake"
        if lake_from is not None:
            shutil.copytree(lake_from, lake)
        database = self.services.create_database(name, template)
        settings = replace(
            self.settings,
            lake_root=str(lake),
            checkpoint_root=str(root / "checkpoints"),
            postgres_dsn=self.services.dsn(database),
            topic=topic,
        )
        return Sink(name, settings, database, root)

    def discard(self, sink: Sink) -> None:
        """Remove a measured sink's files now (they add up over repetitions), unless ``--keep``."""
        if not self.options.keep:
            shutil.rmtree(sink.root, ignore_errors=True)

    def produce(self, topic: str, count: int, entities: int, prefix: str, seed: int) -> ProduceReport:
        """Produce ``count`` synthetic events to a new ``topic`` with the options' rates and partitions."""
        from tidemark.producer import ProduceSpec, produce

        o = self.options
        spec = ProduceSpec(
            count=count,
            entities=entities,
            duplicate_rate=o.duplicate_rate,
            late_rate=o.late_rate,
            malformed_rate=o.malformed_rate,
            seed=seed,
            id_prefix=prefix,
        )
        if topic not in self.services.topics:  # removed once at clean-up, however often produced to
            self.services.topics.append(topic)
        return produce(self.settings, spec, topic=topic, partitions=o.partitions)
