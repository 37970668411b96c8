"""The bench's figures: medians, rates and ratios of what the stages measured (the checks that hold figures to
targets are ``benchmarks/checks.py``'s, the table and the JSON document ``benchmarks/report.py``'s).

Everything here is plain computation on what the stages measured (tests/unit/benchmarks/test_bench.py),
except :func:`machine_info` and :func:`versions`, which describe where and with what it ran.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def median(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def per_second(count: int, seconds: float | None) -> float | None:
    """``count`` per second, or None when there is no time or nothing was counted."""
    if seconds is None or seconds <= 0 or count <= 0:
        return None
    return count / seconds


def throughput_ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` of two rates (or two times), None if either is missing or zero."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


@dataclass
class Measurement:
    """Repeated timings of one stage, with the CPU time each repetition cost."""

    key: str
    label: str
    count: int  # events (or rows) each repetition processes
    unit: str = "events"
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # bench process tree + Kafka + PostgreSQL
    cpu_seconds_client: list[float] = field(default_factory=list)  # bench process tree only (Python, JVM)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, seconds: float, cpu_client: float = 0.0, cpu_services: float = 0.0) -> None:
        self.seconds.append(seconds)
        self.cpu_seconds_client.append(cpu_client)
        self.cpu_seconds.append(cpu_client + cpu_services)

    @property
    def median_seconds(self) -> float | None:
        return median(self.seconds)

    @property
    def rate(self) -> float | None:
        return per_second(self.count, self.median_seconds)

    @property
    def cpu_seconds_per_million(self) -> float | None:
        cpu = median(self.cpu_seconds)
        if cpu is None or self.count <= 0:
            return None
        return cpu / self.count * 1_000_000

    def to_json(self) -> dict[str, Any]:
        client = median(self.cpu_seconds_client)
        return {
            "label": self.label,
            self.unit: self.count,
            "unit": self.unit,
            "repetitions": len(self.seconds),
            "seconds": [round(s, 4) for s in self.seconds],
            "seconds_median": rounded(self.median_seconds, 4),
            f"{self.unit}_per_second": rounded(self.rate, 1),
            "cpu_seconds": [round(s, 3) for s in self.cpu_seconds],
            "cpu_seconds_median": rounded(median(self.cpu_seconds), 3),
            "cpu_seconds_client_median": rounded(client, 3),
            f"cpu_seconds_per_million_{self.unit}": rounded(self.cpu_seconds_per_million, 2),
            "details": self.details,
        }


def rounded(value: float | None, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def machine_info() -> dict[str, Any]:
    """CPUs, platform, Python, load average and memory of this machine."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import psutil

        info["memory_bytes"] = psutil.virtual_memory().total
    except ImportError:
        pass
    return info


def versions(settings: Settings, spark: SparkSession | None, postgresql: str | None) -> dict[str, Any]:
    """Versions of the packages, jars, Spark, Java and PostgreSQL (``postgresql``, as the server reports it)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, Any] = {}
    for package in ("pyspark", "delta-spark", "confluent-kafka", "psycopg2-binary", "pandas", "pyarrow"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    try:
        import confluent_kafka

        found["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    broker = sorted(settings.jars_dir.glob("kafka/kafka_2.13-*.jar"))
    found["kafka_broker"] = broker[0].stem.removeprefix("kafka_2.13-") if broker else None
    for prefix, name in (
        ("delta-spark_", "delta_jar"),
        ("spark-sql-kafka-0-10_", "spark_kafka_connector_jar"),
        ("kafka-clients-", "spark_kafka_clients_jar"),
    ):
        jars = sorted(settings.jars_dir.glob(f"spark/{prefix}*.jar"))
        found[name] = jars[0].stem if jars else None
    if spark is not None:
        with contextlib.suppress(Exception):  # a stopped session has no version to report
            found["spark"] = spark.version
    try:
        from tidemark.embedded.process import java_major_version

        found["java_major"] = java_major_version()
    except Exception:
        found["java_major"] = None
    found["postgresql"] = postgresql
    return found
