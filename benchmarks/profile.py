"""What a measured run did beside how long it took: the Spark SQL executions, jobs and Delta commits
of its batches (:func:`run_profile`, always), and with the Spark UI on (``TIDEMARK_SPARK_UI=true``)
each job with the line that started it and its duration, from the UI's REST API.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.jvm import classes_generated, newest_query_ids
from spark_jobs.sinks.delta import table_versions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.settings import Settings


@dataclass(frozen=True)
class RunProfile:
    """A scheduled run into a new lake: its batches, and the Spark SQL executions, jobs and Delta
    commits (per sink table, its creation left out) they ran, and the classes Spark generated and
    compiled for them (none for a plan whose code was compiled before)."""

    batches: int
    executions: int
    jobs: int
    commits: dict[str, int]
    classes: int = 0

    def per_batch(self, value: int) -> float:
        return value / self.batches if self.batches else 0.0

    def describe(self) -> str:
        commits = ", ".join(f"{name} {self.per_batch(n):.1f}" for name, n in self.commits.items())
        return (
            f"per batch ({self.batches}): {self.per_batch(self.executions):.1f} Spark SQL executions, "
            f"{self.per_batch(self.jobs):.1f} jobs, {self.per_batch(self.classes):.1f} classes generated, "
            f"Delta commits {commits}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "executions_per_batch": round(self.per_batch(self.executions), 1),
            "jobs_per_batch": round(self.per_batch(self.jobs), 1),
            "classes_generated_per_batch": round(self.per_batch(self.classes), 1),
            "commits_per_batch": {name: round(self.per_batch(n), 2) for name, n in self.commits.items()},
        }


def run_profile(spark: SparkSession, settings: Settings, before: tuple[int, int, int], batches: int) -> RunProfile:
    """The profile of a run into ``settings``' new lake that started after ``before``
    (:func:`counters` then) and ran ``batches`` batches. The lake's tables are created at version 0,
    so each table's version is the commits the batches made."""
    executions, jobs, classes = counters(spark)
    return RunProfile(
        batches, executions - before[0], jobs - before[1], table_versions(spark, settings), classes - before[2]
    )


def counters(spark: SparkSession) -> tuple[int, int, int]:
    """The newest Spark SQL execution's and job's ids and the classes generated so far: two readings
    bracket what the work between them ran."""
    return (*newest_query_ids(spark), classes_generated(spark))


def _get(spark: SparkSession, what: str) -> list[dict[str, Any]]:
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{what}"
    with urllib.request.urlopen(url, timeout=30) as response:  # the local Spark UI
        return json.load(response)


def _time(text: str | None) -> datetime | None:
    # The UI's format: 2026-11-22T06:18:15.123GMT
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z") if text else None


def last_job_id(spark: SparkSession) -> int | None:
    """The newest job's id, or None when the UI is off (then nothing is profiled)."""
    if not spark.sparkContext.uiWebUrl:
        return None
    jobs = _get(spark, "jobs")
    return max((job["jobId"] for job in jobs), default=-1)


def jobs_since(spark: SparkSession, after: int) -> list[dict[str, Any]]:
    """Each job after job ``after``, oldest first: what started it, its Spark SQL description, when it
    started (seconds after the first of them) and how long it took."""
    jobs = []
    first = None
    for job in sorted(_get(spark, "jobs"), key=lambda j: j["jobId"]):
        if job["jobId"] <= after:
            continue
        start, end = _time(job.get("submissionTime")), _time(job.get("completionTime"))
        first = first or start
        jobs.append(
            {
                "job": job["jobId"],
                "name": job.get("name", ""),
                "description": (job.get("description") or "")[:120],
                "started": round((start - first).total_seconds(), 3) if start and first else None,
                "seconds": round((end - start).total_seconds(), 3) if start and end else None,
                "tasks": job.get("numTasks"),
            }
        )
    return jobs
