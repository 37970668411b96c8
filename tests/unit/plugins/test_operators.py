"""The Spark submit operator: how a job is started."""

from __future__ import annotations


def test_spark_submit_runs_a_module_job_itself_and_a_package_job_through_its_main() -> None:
    from pathlib import Path

    from tidemark_airflow.operators import JOBS, job_application

    assert Path(job_application("ingest")).parts[-2:] == ("spark_jobs", "ingest.py")
    assert Path(job_application("reconcile")).parts[-3:] == ("spark_jobs", "reconcile", "__main__.py")
    assert all(Path(job_application(job)).is_file() for job in JOBS)
