"""The lake's tables: created when missing, with the contract's typed columns added.

Every pipeline's record tables (``events``, ``duplicates``, ``quarantine``) and ``sessions`` live
under its lake folder (``Settings.table_path``); :func:`ensure_tables` creates those that are
missing, and :func:`add_typed_columns` adds the columns a contract declares that a table lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from spark_jobs import jvm
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.errors import ContractChanged
from spark_jobs.settings import Settings
from spark_jobs.sinks.delta import table
from spark_jobs.spark import run_concurrently

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.pipelines import Contract


def ensure_tables(spark: SparkSession, settings: Settings, contract: Contract | None = None) -> list[str]:
    """Create the sink tables that do not exist yet (idempotent); returns the names it created.

    A table whose ``_delta_log`` already holds commits is left alone without loading it: every
    run calls this, and loading four snapshots costs more than an empty run's work. Missing
    tables (a first run) are created concurrently, ``events`` with the typed columns of
    ``contract`` (default: the pipeline's, read from its file only when a table is missing;
    :func:`add_typed_columns` adds those a later contract declares).
    """

    def missing(name: str) -> bool:
        return not jvm.list_names(spark, f"{settings.table_path(name).rstrip('/')}/_delta_log")

    def create(name: str, contract: Contract) -> Callable[[], None]:
        path, schema = settings.table_path(name), contract.table_schema(name)
        return lambda: create_table(spark, path, schema, TABLE_PROPERTIES.get(name))

    created = [name for name in TABLE_SCHEMAS if missing(name)]
    if created:
        declared = contract or settings.contract()
        run_concurrently([create(name, declared) for name in created])
    return created


# Spark SQL's names of the types a typed column may be declared with, where they differ.
_TYPE_NAMES = {"long": "bigint", "integer": "int"}


def add_typed_columns(spark: SparkSession, settings: Settings, contract: Contract) -> list[str]:
    """Add to the pipeline's ``events`` the typed columns ``contract`` declares and the table lacks
    (older rows hold null there); returns their names. One commit when there are some, none
    otherwise, so a run that stopped after it adds nothing twice. A column the table holds with
    another type than the contract's is a :class:`ContractChanged`, before any write: the contract
    recorded by the last batch may not know the column yet (a run that read nothing added it)."""
    path = settings.table_path("events")
    held = {f.name: f.dataType.simpleString() for f in table(spark, path).toDF().schema.fields}
    for column in contract.columns:
        declared = _TYPE_NAMES.get(column.type, column.type)
        if column.name in held and held[column.name] != declared:
            raise ContractChanged(
                f"pipeline {settings.pipeline!r}: contract.columns.{column.pointer[1:].replace('/', '.')}: events "
                f"holds the column {column.name} as {held[column.name]}, the contract declares {column.type}; a typed "
                f"column keeps its type. Declare it {held[column.name]} again, or declare the new type as a new "
                "pipeline (another name and topic)"
            )
    missing = [c for c in contract.columns if c.name not in held]
    if missing:
        columns = ", ".join(f"`{c.name}` {c.type}" for c in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
    return [c.name for c in missing]


def create_table(spark: SparkSession, path: str, schema: str, properties: dict[str, str] | None = None) -> None:
    """Create the Delta table at ``path`` with ``schema`` (a DDL column list) unless it exists."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(path)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    for column in schema.split(", "):
        column_name, column_type = column.split(" ")
        builder = builder.addColumn(column_name, column_type)
    builder.execute()


# Table properties beyond Delta's defaults, set when a table is created and by maintenance on tables
# created before them. ``sessions``: a batch replaces a few open sessions. Without deletion
# vectors Delta rewrites every file holding one, copying all its other sessions, and the new file
# holds the open sessions again: after a compaction, every batch copied all of history. With them,
# it marks the old rows deleted and writes only the changed ones. Its change data feed gives
# reconcile exactly the rows commits changed (files marked by deletion vectors hold many others).
TABLE_PROPERTIES: dict[str, dict[str, str]] = {
    "sessions": {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
}
