"""spark-submit entry point: ``spark-submit spark_jobs/reconcile/__main__.py --run-id RUN_ID``
(``python -m spark_jobs.reconcile`` does the same)."""

from __future__ import annotations

from spark_jobs.errors import run_job
from spark_jobs.reconcile.run import main

if __name__ == "__main__":
    run_job(main)
