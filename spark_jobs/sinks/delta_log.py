"""What Delta commits touched, read from the tables' logs instead of the tables.

Reconcile re-checks only what changed since its previous run, and the commit log says what that
is without a full table read: :func:`log_version` gives a local table's latest version without
Spark, and :func:`touched_since` reads the add and remove actions of the commits between two
versions (and the change data feed of ``sessions``), then the rows of just those files.
Files are checked for through :mod:`spark_jobs.jvm` (Hadoop's FileSystem), as Spark wrote them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs import jvm
from spark_jobs.contract import COORDINATES, RECORD_TABLES, SESSION_COLUMNS, TABLE_SCHEMAS
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, delta_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.spark import FrozenFrames


# ---------------------------------------------------------------------------------------------
# Delta versions without Spark


def log_version(table_path: str) -> int | None:
    """The latest commit version of a local Delta table (-1 when it has none), None for remote paths."""
    local = re.sub(r"^file:(//)?", "", table_path)
    if "://" in local:
        return None
    log = Path(local) / "_delta_log"
    if not log.is_dir():
        return -1
    versions = [int(p.name[:20]) for p in log.iterdir() if re.fullmatch(r"\d{20}\.json", p.name)]
    return max(versions, default=-1)


def local_versions(settings: Settings) -> dict[str, int] | None:
    found = {name: log_version(settings.table_path(name)) for name in TABLE_SCHEMAS}
    versions = {name: v for name, v in found.items() if v is not None}
    return None if len(versions) < len(found) else versions


def spark_versions(spark: SparkSession, settings: Settings) -> dict[str, int]:
    delta_tables.ensure_tables(spark, settings)
    return delta.table_versions(spark, settings)


# ---------------------------------------------------------------------------------------------
# What commits touched


@dataclass(frozen=True)
class Touched:
    """What commits after the previous run touched, read from the files they added and removed.

    ``coordinates`` (record tables) and ``times`` (``entity_id``, ``arrival_time``: events' arrival
    times and sessions' starts) cover every row of those files; None when unknown (a first run, or a
    log that was cleaned up). ``sessions_added`` / ``sessions_removed`` are the session rows the
    commits added and removed for good, for updating the previous run's checksums: from the change
    data feed, which also gives ``times`` the changed sessions only; without it, the rows of the
    files added and removed, None when they cannot be trusted (deletion vectors, or a removed file
    already vacuumed).
    """

    coordinates: DataFrame | None
    times: DataFrame | None
    sessions_added: DataFrame | None = None
    sessions_removed: DataFrame | None = None


def touched_since(
    spark: SparkSession,
    settings: Settings,
    previous: dict[str, int] | None,
    versions: dict[str, int],
    frozen: FrozenFrames,
) -> Touched:
    """What the commits after ``previous`` touched, from the Delta log's add and remove actions."""
    from pyspark.sql import functions as F

    if previous is None:
        return Touched(None, None)
    coordinates, times = [], []
    none_yet = spark.createDataFrame([], TABLE_SCHEMAS["sessions"])
    sessions_added: DataFrame | None = none_yet
    sessions_removed: DataFrame | None = none_yet
    for name in TABLE_SCHEMAS:
        start, end = previous.get(name, -1), versions[name]
        if end <= start:
            continue
        path = settings.table_path(name)
        files = changed_files(spark, path, start, end)
        # An added file VACUUM deleted already (compacted into another since): what it touched is
        # unknown, so everything is checked.
        if files is None or not _all_exist(spark, path, files.added | files.changes):
            return Touched(None, None)
        changes = session_change_feed(spark, path, start, end, frozen) if name == "sessions" else None
        if changes is not None:
            times.append(changes.select("entity_id", F.col("started_at").alias("arrival_time")))
            sessions_added = changes.where("_change_type IN ('insert', 'update_postimage')").select(*SESSION_COLUMNS)
            sessions_removed = changes.where("_change_type IN ('delete', 'update_preimage')").select(*SESSION_COLUMNS)
            continue
        # A removed file that is gone had its rows rewritten into an added file or deleted (a deleted
        # row's range is still re-checked by rotation).
        gone = {p for p in files.removed if not _all_exist(spark, path, [p])}
        rows = _read_files(spark, path, files.added | (files.removed - gone), TABLE_SCHEMAS[name])
        if name in RECORD_TABLES:
            coordinates.append(rows.select(*COORDINATES))
        if name == "events":
            times.append(rows.select("entity_id", "arrival_time"))
        if name == "sessions":
            times.append(rows.select("entity_id", F.col("started_at").alias("arrival_time")))
            if files.exact and not gone - files.added:
                sessions_added = _read_files(spark, settings.table_path(name), files.added - files.removed,
                                             TABLE_SCHEMAS[name])  # fmt: skip
                sessions_removed = _read_files(spark, settings.table_path(name), files.removed - files.added,
                                               TABLE_SCHEMAS[name])  # fmt: skip
            else:
                sessions_added = sessions_removed = None
    empty_coordinates = spark.createDataFrame([], "topic string, partition int, offset long")
    empty_times = spark.createDataFrame([], "entity_id string, arrival_time timestamp")
    return Touched(
        union(coordinates, empty_coordinates).distinct(),
        union(times, empty_times).where(F.col("entity_id").isNotNull()),
        sessions_added,
        sessions_removed,
    )


def union(frames: list[DataFrame], empty: DataFrame) -> DataFrame:
    """``empty`` followed by ``frames``, by column name (reconcile's one way to stack frames)."""
    result = empty
    for frame in frames:
        result = result.unionByName(frame)
    return result


@dataclass(frozen=True)
class ChangedFiles:
    added: set[str]
    removed: set[str]
    exact: bool  # no deletion vectors: a file's rows are all live or all gone
    changes: set[str]  # change data files (a change data feed's updates and deletes)


def changed_files(spark: SparkSession, table_path: str, after: int, upto: int) -> ChangedFiles | None:
    """The data files commits ``after < v <= upto`` added and removed (None: part of the log is gone)."""
    from pyspark.sql.types import StructType

    root = table_path.rstrip("/")
    logs = [f"{root}/_delta_log/{v:020d}.json" for v in range(after + 1, upto + 1)]
    if not _all_exist(spark, root, logs):
        return None
    actions = spark.read.json(logs)
    found: dict[str, set[str]] = {"add": set(), "remove": set()}
    exact = True
    for kind in found:
        if kind not in actions.columns:
            continue
        action = actions.schema[kind].dataType
        assert isinstance(action, StructType)  # a log action is a JSON object, which Spark reads as a struct
        fields = action.fieldNames()
        columns = [f"{kind}.path"] + ([f"{kind}.deletionVector IS NOT NULL"] if "deletionVector" in fields else [])
        # dataChange false: a compaction's rewrite (maintenance), the same rows in other files.
        changed = f"{kind}.path IS NOT NULL" + (f" AND {kind}.dataChange" if "dataChange" in fields else "")
        for row in actions.where(changed).selectExpr(*columns).collect():
            found[kind].add(row[0])
            exact = exact and not (len(row) > 1 and row[1])
    changes = set()
    if "cdc" in actions.columns:
        changes = {row[0] for row in actions.where("cdc.path IS NOT NULL").select("cdc.path").collect()}
    return ChangedFiles(found["add"], found["remove"], exact, changes)


def session_change_feed(
    spark: SparkSession, path: str, after: int, upto: int, frozen: FrozenFrames
) -> DataFrame | None:
    """The sessions rows that commits ``after < v <= upto`` inserted, updated (before and after) and
    deleted, from the table's change data feed (``_change_type``); None when a commit in that range
    recorded none (a table from before the feed was on: maintenance turns it on)."""
    from pyspark.errors import AnalysisException

    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", after + 1)
        .option("endingVersion", upto)
        .load(path)
    )
    try:
        return frozen.freeze(changes)
    except AnalysisException as e:
        if "DELTA_MISSING_CHANGE_DATA" not in str(e):
            raise
        return None


def _absolute(root: str, path: str) -> str:
    from urllib.parse import unquote

    return path if "://" in path or path.startswith("/") else f"{root.rstrip('/')}/{unquote(path)}"


def _read_files(spark: SparkSession, table_path: str, paths: set[str], schema: str) -> DataFrame:
    """The rows of data files ``paths`` of a table (the raw files: deleted rows included)."""
    if not paths:
        return spark.createDataFrame([], schema)
    files = [_absolute(table_path, p) for p in sorted(paths)]
    # A file VACUUM deletes while this reads is skipped, as one gone before (see touched_since).
    return spark.read.schema(schema).option("ignoreMissingFiles", "true").parquet(*files)


def _all_exist(spark: SparkSession, root: str, paths: set[str] | list[str]) -> bool:
    return all(jvm.exists(spark, _absolute(root, p)) for p in paths)
