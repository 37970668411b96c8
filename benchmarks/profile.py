"""Which Spark jobs a measured run started, from the Spark UI's REST API (``TIDEMARK_SPARK_UI=true``).

The profile lists each job with the line that started it and its duration, so a bench result says
not only how long a batch took but what work it did.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
