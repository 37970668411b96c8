"""Where a pipeline's state lives and what its parts are called: the one place that decides it.

Every pipeline has its own PostgreSQL schema, folder of Delta tables, Spark checkpoints, advisory-lock
keys, DAGs, Asset and spark-submit application, each named after the pipeline. The pipeline
:data:`DEFAULT_PIPELINE` (``events``) is the one a deployment made before pipelines were declared
has: it keeps the names that deployment uses (PostgreSQL's ``public`` schema, the lake root's and
checkpoint root's top level, the lock keys and DAG ids without a suffix, the topic the setting
``TIDEMARK_TOPIC`` names), so its state stays where it is. :class:`PipelineNames` answers each of
these for any pipeline; nothing else compares a name with :data:`DEFAULT_PIPELINE`.
"""

from __future__ import annotations

from dataclasses import dataclass

# The pipeline of a deployment made before pipelines were declared.
DEFAULT_PIPELINE = "events"
# Its topic when neither its entry nor TIDEMARK_TOPIC names one.
DEFAULT_TOPIC = "events"
# The DAGs each pipeline has (dags/).
DAG_KINDS = ("ingest", "backfill", "reconcile", "repair", "readmit", "maintenance")
# The schema the default pipeline's tables are in.
_DEFAULT_SCHEMA = "public"


@dataclass(frozen=True)
class PipelineNames:
    """The names of the pipeline ``name``'s state and parts: the unsuffixed ones for :data:`DEFAULT_PIPELINE`."""

    name: str

    @property
    def _keeps_old_names(self) -> bool:
        return self.name == DEFAULT_PIPELINE

    @classmethod
    def of_schema(cls, schema: str) -> PipelineNames:
        """The pipeline whose tables are in the PostgreSQL ``schema`` (``public``: ``events``)."""
        return cls(DEFAULT_PIPELINE if schema == _DEFAULT_SCHEMA else schema)

    @property
    def postgres_schema(self) -> str:
        """The PostgreSQL schema of the pipeline's tables (ledger, sessions, reconcile history, ...)."""
        return _DEFAULT_SCHEMA if self._keeps_old_names else self.name

    def folder(self, root: str) -> str:
        """The pipeline's folder of ``root`` (the lake's, where its Delta tables are, or the checkpoints'):
        ``<root>/<name>``; the default pipeline's is the root's top level. No trailing '/'."""
        root = root.rstrip("/")
        return root if self._keeps_old_names else f"{root}/{self.name}"

    def lock_key(self, key: str) -> str:
        """The pipeline's advisory-lock key of ``key`` (e.g. ``tidemark-writer``): each pipeline has its own."""
        return key if self._keeps_old_names else f"{key}:{self.name}"

    def dag_id(self, kind: str) -> str:
        """The id of the pipeline's DAG of ``kind``: ``tidemark_<kind>`` for ``events``, ``tidemark_<kind>__<name>``
        for another."""
        if kind not in DAG_KINDS:
            raise ValueError(f"kind must be one of {DAG_KINDS}, got {kind!r}")
        return f"tidemark_{kind}" if self._keeps_old_names else f"tidemark_{kind}__{self.name}"

    @property
    def asset(self) -> tuple[str, str]:
        """The name and URI of the Airflow Asset a successful ingest, backfill or repair of the pipeline updates."""
        if self._keeps_old_names:
            return "tidemark_sinks", "tidemark://sinks"
        return f"tidemark_sinks__{self.name}", f"tidemark://sinks/{self.name}"

    def app_name(self, job: str) -> str:
        """The spark-submit application name of the pipeline's ``job`` (``ingest``, ``reconcile``, ...)."""
        return f"tidemark-{job}" if self._keeps_old_names else f"tidemark-{job}-{self.name}"

    @property
    def cli_flag(self) -> str:
        """`` --pipeline NAME`` for a ``tidemark`` command line of the pipeline (nothing for ``events``)."""
        return "" if self._keeps_old_names else f" --pipeline {self.name}"

    @property
    def page_query(self) -> dict[str, str]:
        """The tidemark page's query parameters that select the pipeline (none for ``events``)."""
        return {} if self._keeps_old_names else {"pipeline": self.name}

    @property
    def sort_key(self) -> tuple[bool, str]:
        """The default pipeline first, then the others by name."""
        return not self._keeps_old_names, self.name

    def settings_topic(self, topic: str) -> str:
        """The topic settings give the pipeline without its entry: ``topic`` (``TIDEMARK_TOPIC``) for ``events``;
        none ('') for another, whose topic only its entry says."""
        return topic if self._keeps_old_names else ""

    def topic(self, declared: str | None, events_topic: str) -> str:
        """The Kafka topic the pipeline reads: the one its entry ``declared``, else its name; the default
        pipeline's is ``events_topic`` (``TIDEMARK_TOPIC``), as it was before pipelines were declared."""
        return declared or (events_topic if self._keeps_old_names else self.name)

    def events_topic(self, topic: str) -> str:
        """The default pipeline's topic as the settings of this pipeline with ``topic`` know it: theirs, for the
        default pipeline's settings; else :data:`DEFAULT_TOPIC` (another pipeline's settings hold its own)."""
        return topic if self._keeps_old_names else DEFAULT_TOPIC
