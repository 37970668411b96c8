"""OpenLineage for tidemark's tasks: which topic, at which offsets, fed which Delta and PostgreSQL tables.

Airflow's OpenLineage provider asks an operator for its lineage when a task completes
(``get_openlineage_facets_on_complete``); :class:`~tidemark_airflow.operators.TidemarkSparkSubmitOperator`
answers with :func:`job_lineage`. It is off unless the provider is configured (``[openlineage]
transport``, ``OPENLINEAGE_URL``, ...). The datasets are named as OpenLineage's naming conventions say:

* the topic: namespace ``kafka://<first bootstrap server>``, name the topic; a run's input facet
  ``tidemark_offsetRanges`` lists the offset ranges its batches processed (partition, start, end);
* the Delta tables: namespace ``file`` (name the absolute path) or ``s3://<bucket>`` (name the key);
* the PostgreSQL tables: namespace ``postgres://<host>:<port>``, name ``<database>.<schema>.<table>``.

Each table has its schema facet (the events table with the contract's typed columns); what a run wrote
has output statistics (rows accepted, duplicates, quarantined); a reconcile run's inputs carry a
data-quality assertion with its verdict, and the run a ``tidemark_reconcile`` facet with its counts.
"""

from __future__ import annotations

from typing import Any

import attr
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    DatasetFacet,
    InputDatasetFacet,
    OutputDatasetFacet,
    RunFacet,
    data_quality_assertions_dataset,
    output_statistics_output_dataset,
    schema_dataset,
)

from spark_jobs.contract import RECORD_TABLES

# The facets are described in the repository's docs/lineage.md; no public host serves them (hence .invalid).
FACETS_SCHEMA = "https://tidemark.invalid/docs/lineage.md"
DELTA_TABLES = (*RECORD_TABLES, "sessions")
WRITING_JOBS = ("ingest", "readmit", "repair")  # what lands records (a backfill is an ingest)


@attr.define
class OffsetRangesInputDatasetFacet(InputDatasetFacet):
    """The offset ranges of the topic a run's batches processed: ``[{"partition", "start", "end"}]``, end exclusive."""

    ranges: list[dict[str, int]] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_SCHEMA}#offset-ranges"


@attr.define
class ReconcileRunFacet(RunFacet):
    """A reconcile run's verdict: its status, the ranges it checked, whether it needed Spark."""

    status: str
    ranges_checked: int
    used_spark: bool

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_SCHEMA}#reconcile"


def job_lineage(job: str, settings, committed: dict | None = None, verdict: tuple | None = None):  # Settings
    """The lineage of a ``job`` run of the pipeline ``settings`` names: an
    ``airflow.providers.openlineage.extractors.OperatorLineage``. ``committed`` is what the run's batches
    committed (:func:`tidemark_airflow.operators.committed_since`), ``verdict`` a reconcile run's
    (``history.run_verdict``: status, report, alert, ranges checked, used Spark, findings opened)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    if job == "reconcile":
        status, _report, _alert, checked, used_spark, _opened = verdict or ("unknown", "", "", 0, False, 0)
        checks = [data_quality_assertions_dataset.Assertion(assertion="tidemark_reconcile", success=status == "ok")]
        facet: dict[str, InputDatasetFacet] = {
            "dataQualityAssertions": data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(checks)
        }
        inputs = [topic_dataset(settings, None, facet)]
        inputs += [
            InputDataset(d.namespace, d.name, facets=d.facets, inputFacets=facet) for d in table_datasets(settings, {})
        ]
        run = {"tidemark_reconcile": ReconcileRunFacet(status, int(checked or 0), bool(used_spark))}
        return OperatorLineage(inputs=inputs, outputs=[], run_facets=run)
    if job == "maintenance":  # compacts and vacuums the Delta tables: they are what it changes
        delta = [d for d in table_datasets(settings, {}) if not d.namespace.startswith("postgres://")]
        return OperatorLineage(inputs=[], outputs=delta)
    written = {"events": "accepted", "duplicates": "duplicates", "quarantine": "quarantined"}
    rows = {table: int(committed[key]) for table, key in written.items()} if committed else {}
    return OperatorLineage(inputs=[topic_dataset(settings, committed)], outputs=table_datasets(settings, rows))


def topic_dataset(settings, committed: dict | None, input_facets: dict | None = None) -> InputDataset:
    """The pipeline's topic; with ``committed``, the offset ranges its batches processed."""
    facets: dict[str, Any] = dict(input_facets or {})
    if committed:
        facets["tidemark_offsetRanges"] = OffsetRangesInputDatasetFacet(offset_ranges(committed))
    return InputDataset(kafka_namespace(settings.bootstrap_servers), settings.topic, inputFacets=facets)


def offset_ranges(committed: dict) -> list[dict[str, int]]:
    """The ranges of ``committed``'s batches (``partition:start-end,...`` each), in order."""
    ranges = []
    for batch in committed["ranges"]:
        for text in filter(None, batch["offsets"].split(",")):
            partition, _, span = text.partition(":")
            start, _, end = span.partition("-")
            ranges.append({"partition": int(partition), "start": int(start), "end": int(end)})
    return sorted(ranges, key=lambda r: (r["partition"], r["start"]))


def table_datasets(settings, rows: dict[str, int]) -> list[OutputDataset]:
    """The pipeline's Delta tables and PostgreSQL ``sessions``, each with its schema; ``rows`` written per
    Delta table as output statistics."""
    contract = settings.contract()
    datasets = []
    for table in DELTA_TABLES:
        namespace, name = delta_name(settings.table_path(table))
        facets: dict[str, DatasetFacet] = {"schema": schema_facet(contract.table_schema(table))}
        written = rows.get(table)
        stats: dict[str, OutputDatasetFacet] = (
            {}
            if written is None
            else {"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(written)}
        )
        datasets.append(OutputDataset(namespace, name, facets=facets, outputFacets=stats))
    namespace, name = postgres_name(settings.postgres_dsn, settings.postgres_schema, "sessions")
    datasets.append(OutputDataset(namespace, name, facets={"schema": schema_facet(contract.table_schema("sessions"))}))
    return datasets


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://host:port`` of the first bootstrap server (OpenLineage's naming for Kafka)."""
    first = bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first.split('://')[-1]}"


def delta_name(path: str) -> tuple[str, str]:
    """A Delta table's (namespace, name): ``file`` and the absolute path, or ``s3://bucket`` and the key."""
    import os

    if "://" not in path:
        return "file", os.path.abspath(path)
    scheme, _, rest = path.partition("://")
    bucket, _, key = rest.partition("/")
    scheme = "s3" if scheme in ("s3a", "s3n") else scheme
    return f"{scheme}://{bucket}", key


def postgres_name(dsn: str, schema: str, table: str) -> tuple[str, str]:
    """A PostgreSQL table's (namespace, name): ``postgres://host:port`` and ``database.schema.table``."""
    from psycopg2.extensions import parse_dsn

    parts = parse_dsn(dsn)
    host, port = parts.get("host", "localhost"), parts.get("port", "5432")
    return f"postgres://{host}:{port}", f"{parts.get('dbname', 'postgres')}.{schema}.{table}"


def schema_facet(ddl: str) -> schema_dataset.SchemaDatasetFacet:
    """The schema facet of a DDL column list (``name type, ...``; a type may hold commas in parentheses)."""
    fields, depth, current = [], 0, ""
    for char in ddl + ",":
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            name, _, type_ = current.strip().partition(" ")
            fields.append(schema_dataset.SchemaDatasetFacetFields(name=name, type=type_.strip()))
            current = ""
        else:
            current += char
    return schema_dataset.SchemaDatasetFacet(fields=fields)
