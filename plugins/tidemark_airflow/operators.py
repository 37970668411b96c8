"""Operators: submit a tidemark Spark job; reconcile without Spark when nothing is new; read the verdict."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from spark_jobs.pipeline_names import DEFAULT_PIPELINE, PipelineNames
from tidemark_airflow.connections import KAFKA_CONN_ID, POSTGRES_CONN_ID, tidemark_settings
from tidemark_airflow.notifiers import StillOpen

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pydantic import JsonValue  # what an asset event's extra holds

    from spark_jobs.settings import Settings

JOBS = ("ingest", "reconcile", "repair", "readmit", "maintenance")


class TidemarkSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit a tidemark job (:func:`job_application`) through the ``spark_default`` connection.

    The master (``local[2]``, ``spark://…``, ``k8s://…``, ``yarn``) is whatever the Spark
    connection says. At run time the job gets the ``TIDEMARK_*`` environment built from the Kafka
    and PostgreSQL connections, and the connector and Delta jars from ``TIDEMARK_JARS_DIR``.

    :param job: ``ingest``, ``reconcile``, ``repair``, ``readmit`` or ``maintenance``
    :param pipeline: the pipeline the job runs (``pipelines.yaml``): its topic, rules, tables and lock
    :param kafka_conn_id: connection with the Kafka client options
    :param postgres_conn_id: connection to the tidemark database
    """

    def __init__(
        self,
        *,
        job: str,
        pipeline: str = DEFAULT_PIPELINE,
        kafka_conn_id: str = KAFKA_CONN_ID,
        postgres_conn_id: str = POSTGRES_CONN_ID,
        **kwargs: Any,
    ) -> None:
        if job not in JOBS:
            raise ValueError(f"job must be one of {JOBS}, got {job!r}")
        kwargs.setdefault("name", PipelineNames(pipeline).app_name(job))
        super().__init__(**kwargs)
        self.job = job
        self.pipeline = pipeline
        self.kafka_conn_id = kafka_conn_id
        self.postgres_conn_id = postgres_conn_id

    def _get_hook(self):  # -> SparkSubmitHook
        """The provider's hook, logging the job's output without the JVM's incubator-module notice."""
        from spark_jobs.spark import JVM_INCUBATOR_NOTICE

        hook = super()._get_hook()
        log_output = hook._process_spark_submit_log
        # The provider has no filter for the lines it logs: this hook's own reader is replaced.
        hook._process_spark_submit_log = lambda itr: log_output(  # type: ignore[method-assign]
            line for line in itr if line.rstrip("\r\n") != JVM_INCUBATOR_NOTICE
        )
        return hook

    def execute(self, context: Context) -> None:
        settings = tidemark_settings(self.pipeline, self.kafka_conn_id, self.postgres_conn_id)
        self._prepare_submit(settings, context)
        started = datetime.now(UTC)
        self._lineage_of = (settings, started)  # the lineage, on success or failure, reads what the run did
        self._committed: dict[str, JsonValue] | None = None
        self._submit(context)
        if self.outlets:
            self._announce_batches(settings, context)

    def _prepare_submit(self, settings: Settings, context: Context) -> None:
        """The job's application, jars, environment and Spark configuration, from ``settings`` and the task."""
        from airflow.sdk import BaseHook

        from spark_jobs.spark import driver_conf, spark_jars
        from spark_jobs.store.runs import STARTED_BY

        self.application = self.application or job_application(self.job)
        self.jars = self.jars or ",".join(str(jar) for jar in spark_jars(settings))
        # Python workers and the driver run this interpreter's environment unless told otherwise.
        python = os.environ.get("PYSPARK_PYTHON", sys.executable)
        started_by = f"airflow {context['dag'].dag_id} {context['run_id']}"  # on the tidemark page's runs
        env = {"PYSPARK_PYTHON": python, STARTED_BY: started_by, **settings.to_env()}
        self.env_vars = env | dict(self.env_vars or {})  # what the task sets explicitly wins
        master = BaseHook.get_connection(self._conn_id).host or ""  # local[2], spark://…, k8s://…, yarn
        records = self._records(settings)
        submitted = {**os.environ, **self.env_vars}  # spark-submit's environment (SparkSubmitHook's)
        conf = driver_conf(settings, master, records, environ=submitted)
        self._log_driver_jvm(settings, master, records, submitted, conf)
        self.conf = {"spark.pyspark.python": python, **conf, **(self.conf or {})}

    def _log_driver_jvm(
        self, settings: Settings, master: str, records: int | None, submitted: dict[str, str], conf: dict[str, str]
    ) -> None:
        """Say how the driver JVM loads its classes, compiles and collects garbage (its Java options in ``conf``)."""
        from spark_jobs.spark import (
            MAP_CLASSES,
            QUICK_COMPILER,
            THROUGHPUT_COLLECTOR,
            WRITE_CLASSES,
            folder_on_class_path,
        )

        if master.startswith("local") and settings.class_archive and (folder := folder_on_class_path(submitted)):
            self.log.info("the driver JVM loads its classes from their jars: %s, a folder Spark puts on its class "
                          "path, is not empty (a JVM archives no classes then)", folder)  # fmt: skip
        for option in conf["spark.driver.extraJavaOptions"].split():
            if option in (QUICK_COMPILER, THROUGHPUT_COLLECTOR):
                does = "compiles" if option == QUICK_COMPILER else "collects garbage"
                self.log.info("about %s records to read: the driver JVM %s with %s", f"{records:,}", does, option)
            elif option.startswith(MAP_CLASSES):
                self.log.info("the driver JVM maps its classes from %s", option.removeprefix(MAP_CLASSES))
            elif option.startswith(WRITE_CLASSES):
                self.log.info("the driver JVM writes the classes it loads to %s when it exits (later runs map them "
                              "from there)", option.removeprefix(WRITE_CLASSES))  # fmt: skip

    def _submit(self, context: Context) -> None:
        """spark-submit the job; when it fails, the job's one-line cause leads the task's error."""
        from spark_jobs.errors import ERROR_FILE

        env_vars = self.env_vars
        assert env_vars is not None  # _prepare_submit set them
        with tempfile.TemporaryDirectory(prefix="tidemark-task-") as scratch:
            cause = Path(scratch) / "error"
            env_vars[ERROR_FILE] = str(cause)
            try:
                super().execute(context)
            except AirflowException:
                # The job's one-line cause (spark_jobs.errors.run_job) leads, not spark-submit's command line.
                if cause.exists() and cause.read_text().strip():
                    raise AirflowFailException(
                        f"{cause.read_text().strip()}\n(the {self.job} job failed: its output is in this task's log)"
                    ) from None
                raise
            finally:
                env_vars.pop(ERROR_FILE, None)

    def _announce_batches(self, settings: Settings, context: Context) -> None:
        """What the run's batches committed, on the task's outlets; an alert when they broke the producer
        requirements too often."""
        extra = self._batches_committed()
        self.log.info("batches committed: %s", extra)
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = extra
        alert = producer_alert(extra, settings.producer_alert_threshold)
        if alert:
            from tidemark_airflow.pipelines import alert_notifier

            self.log.warning("%s", alert)
            alert_notifier(settings.declared()).send(
                f"tidemark alert: {context['dag'].dag_id} run {context['run_id']}\n{alert}"
            )

    def get_openlineage_facets_on_complete(self, task_instance):  # -> OperatorLineage
        """The run's lineage for Airflow's OpenLineage provider (:mod:`tidemark_airflow.lineage`): the topic and
        the offset ranges its batches processed, the tables it wrote and how many rows; a reconcile's verdict."""
        from spark_jobs import db
        from spark_jobs.store import history
        from tidemark_airflow.lineage import WRITING_JOBS, job_lineage

        settings, _started = self._lineage_of
        committed = self._batches_committed() if self.job in WRITING_JOBS else None
        verdict = None
        if self.job == "reconcile":
            run_id = list(self.application_args or [])[1]  # --run-id RUN
            with db.transaction(settings.pipeline_dsn) as cur:
                verdict = history.run_verdict(cur, run_id)
        return job_lineage(self.job, settings, committed, verdict)

    def get_openlineage_facets_on_failure(self, task_instance):  # -> OperatorLineage | None
        """A failed run's lineage: what its batches committed before it failed (none before the job started)."""
        return self.get_openlineage_facets_on_complete(task_instance) if hasattr(self, "_lineage_of") else None

    def _batches_committed(self) -> dict[str, JsonValue]:
        """What the run's batches committed (:func:`committed_since`), read once for the asset and the lineage."""
        if self._committed is None:
            self._committed = committed_since(*self._lineage_of)
        return self._committed

    def _records(self, settings) -> int | None:  # Settings
        """About how many records the job will read, where that is known before it starts: a scheduled
        ingest's (what Kafka holds beyond what the ledger says was processed); at most what the
        pipeline stores for a job over it (maintenance, reconcile, repair, readmit)."""
        from spark_jobs.store.ledger import stored_records
        from spark_jobs.store.runs import unread_records

        args = list(self.application_args or [])
        if self.job == "ingest" and args[:1] == ["scheduled"]:
            return unread_records(settings, settings.topic)
        if self.job in JOBS_OVER_STORED:
            return stored_records(settings)
        return None


JOBS_OVER_STORED = ("maintenance", "reconcile", "repair", "readmit")  # each reads at most what the pipeline stores


def job_application(job: str) -> str:
    """The file spark-submit runs for ``job``: ``spark_jobs/<job>.py``, or for a package job
    (``spark_jobs/<job>/``) its ``__main__.py``. Found without importing the job."""
    spec = find_spec(f"spark_jobs.{job}")
    if spec is None or spec.origin is None:
        raise ValueError(f"no tidemark job {job!r} in spark_jobs")
    if spec.submodule_search_locations is not None:  # a package: its origin is __init__.py
        return str(Path(spec.origin).with_name("__main__.py"))
    return spec.origin


def producer_alert(extra: dict, threshold: int) -> str | None:
    """The alert text when the run's batches broke the producer requirements more than ``threshold`` times."""
    broken = extra["producer"]
    if sum(broken.values()) <= threshold:
        return None
    what = ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in broken.items() if n)
    return (
        f"the producers of topic {extra['topic']} broke tidemark's requirements in this run's batches: {what}. "
        "Sessions of those entities may get new IDs when earlier records arrive in a later batch. Key records "
        "by entity_id with Java's murmur2 partitioner (librdkafka: partitioner=murmur2_random), do not add "
        "partitions to a live topic, and use message.timestamp.type=LogAppendTime (README, Producer requirements)."
    )


def committed_since(settings, started: datetime) -> dict[str, JsonValue]:  # Settings
    """What the topic's ledger gained since ``started`` (one writer at a time: this run's batches)."""
    from spark_jobs import db
    from spark_jobs.store import ledger

    with db.transaction(settings.pipeline_dsn) as cur:
        batches = ledger.committed_batches(cur, settings.topic, started)
    return {
        "topic": settings.topic,
        "batches": len(batches),
        "records_read": sum(b[2] for b in batches),
        "accepted": sum(b[3] for b in batches),
        "duplicates": sum(b[4] for b in batches),
        "quarantined": sum(b[5] for b in batches),
        "ranges": [{"pipeline": b[0], "batch_id": b[1], "offsets": b[6]} for b in batches],
        "producer": {
            "entities_in_many_partitions": sum(b[7] for b in batches),
            "not_log_append_time": sum(b[8] for b in batches),
            "time_went_back": sum(b[9] for b in batches),
        },
    }


def reconcile_without_spark(run_id: str, log, pipeline: str = DEFAULT_PIPELINE) -> bool:  # a logger
    """Reconcile ``pipeline`` without Spark when there is nothing new to check; say whether the Spark job must run.

    Runs :func:`spark_jobs.reconcile.run.run` without a Spark session: when no range is new or due and
    the sinks are as the previous run left them, it checks PostgreSQL's sessions against the Delta
    summary of that run, records the outcome and returns False (the Spark task is skipped).
    Otherwise it records nothing and returns True: the ``reconcile`` Spark job runs the check.
    """
    from spark_jobs import reconcile

    report = reconcile.run(tidemark_settings(pipeline), run_id, spark_factory=None, wait=True)
    if report is None:
        log.info("new ranges or commits to check: the Spark job counts them")
        return True
    log.info("nothing new since the previous run: checked without Spark")
    return False


def repair_form_url(run_id: str, pipeline: str = DEFAULT_PIPELINE) -> str:
    """The tidemark page's repair form for ``pipeline``'s ``run_id`` (under Airflow's ``[api] base_url``): what
    the repair will do, and a button that triggers the pipeline's ``tidemark_repair`` with the run id filled in."""
    from airflow.configuration import conf

    from tidemark_airflow.view import repair_href

    base = conf.get("api", "base_url", fallback="") or "http://localhost:8080"
    return f"{base.rstrip('/')}/tidemark/{repair_href(run_id, pipeline)}"


class VerdictOperator(BaseOperator):
    """Read a recorded reconcile run; log its report and fail with the short alert when it found something.

    A finding is not a transient failure: give it ``retries=0``; the failure callback sends the alert.

    :param reconcile_run_id: the run (templated); for a repair, the repair's id, whose re-check is read
    :param repair: whether ``reconcile_run_id`` names a repair (``repairs`` table) instead of a run
    :param pipeline: the pipeline whose reconcile history holds the run
    """

    template_fields: Sequence[str] = ("reconcile_run_id",)

    def __init__(
        self,
        *,
        reconcile_run_id: str = "{{ run_id }}",
        repair: bool = False,
        pipeline: str = DEFAULT_PIPELINE,
        postgres_conn_id: str = POSTGRES_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reconcile_run_id = reconcile_run_id
        self.repair = repair
        self.pipeline = pipeline
        self.postgres_conn_id = postgres_conn_id

    def execute(self, context: Context) -> dict[str, object]:
        from spark_jobs import db
        from spark_jobs.store import history

        settings = tidemark_settings(self.pipeline, postgres_conn_id=self.postgres_conn_id)
        with db.transaction(settings.pipeline_dsn) as cur:
            run_id = self.reconcile_run_id
            if self.repair:
                recheck = history.repair_recheck(cur, run_id)
                if recheck is None or recheck[0] is None:
                    raise AirflowFailException(f"repair {run_id} recorded no re-check: see the repair task's log")
                run_id = recheck[0]
                self.log.info("repair actions:\n%s", "\n".join(f"- {a}" for a in recheck[1]))
            row = history.run_verdict(cur, run_id)
        if row is None:
            raise AirflowFailException(f"reconcile run {run_id} recorded nothing: see the reconcile task's log")
        self._verdict = (settings, row)  # the lineage's data-quality facet, found or not
        status, report, alert, checked, used_spark, opened = row
        self.log.info("%s", report)
        if status == "mismatch":
            message = f"{alert}\nRepair: {repair_form_url(run_id, self.pipeline)}"
            run_type = getattr(context.get("dag_run"), "run_type", None)
            if not self.repair and not opened and getattr(run_type, "value", run_type) == "asset_triggered":
                # Red as long as a finding is open, but alerted when found, daily, and on request.
                raise StillOpen(message)
            raise AirflowFailException(message)
        if status != "ok":
            raise AirflowFailException(alert)
        return {"run_id": run_id, "status": status, "ranges_checked": checked, "used_spark": used_spark}

    def get_openlineage_facets_on_complete(self, task_instance):  # -> OperatorLineage | None
        """The reconcile run's verdict as OpenLineage data-quality facets on the datasets it checked."""
        from tidemark_airflow.lineage import job_lineage

        return (
            job_lineage("reconcile", *self._verdict[:1], verdict=self._verdict[1])
            if hasattr(self, "_verdict")
            else None
        )

    get_openlineage_facets_on_failure = get_openlineage_facets_on_complete  # a mismatch fails the task
