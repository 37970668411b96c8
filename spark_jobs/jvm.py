"""What tidemark needs from Spark's JVM that PySpark has no Python API for, in one place.

Files go through Hadoop's ``FileSystem`` (so a local path, ``file://`` or ``s3a://`` is read the way
Spark writes it, never with ``pathlib``); the rest are a Delta log checkpoint, a SQL setting's
parsed value, a frame's plan, the local checkpoints a batch releases, the console lines Delta
prints and the count of queries a piece of work ran. Everything else in the pipeline stays on
PySpark's public API; ``_jvm``, ``_jsc``, ``_jdf`` and ``_jsparkSession`` are reached from here only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_jobs.errors import ConfigError

if TYPE_CHECKING:
    from py4j.java_gateway import JVMView
    from pyspark.sql import DataFrame, SparkSession


def _jvm(spark: SparkSession) -> JVMView:
    """The JVM of ``spark``'s context (which a started context always has)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # set when the context started, with its gateway
    return jvm


# py4j asks the JVM for every name on every access: each segment of ``jvm.org.apache.x.Y``, each static
# method of a class (``functions.col``). A name that is no class (``org``, ``org.apache``, or a simple
# name tried against each package PySpark imports) is searched for in every one of the driver's ~280
# jars before py4j answers "a package". PySpark resolves names this way for each column and function
# it builds: five to a dozen such searches for every ``F.col``. Remembered, each name is resolved once
# per gateway; an import added to a view (``java_import``) forgets them all, since it can change what
# a simple name resolves to. A static field's value is never remembered.
_NAMES = "_tidemark_names"
_names_generation = [0]


def remember_names() -> None:
    """Let py4j's views, packages and classes resolve each name once (:data:`_NAMES`). Once per process."""
    from py4j import java_gateway as py4j

    if getattr(py4j, _NAMES, False):
        return
    setattr(py4j, _NAMES, True)
    for kind in (py4j.JVMView, py4j.JavaPackage, py4j.JavaClass):
        kind.__getattr__ = _remembering(kind.__getattr__, (py4j.JavaPackage, py4j.JavaClass, py4j.JavaMember))
    java_import = py4j.java_import

    def importing(jvm_view: Any, import_str: str) -> Any:
        _names_generation[0] += 1
        return java_import(jvm_view, import_str)

    py4j.java_import = importing


def _remembering(resolve: Any, kinds: tuple[type, ...]) -> Any:
    def lookup(self: Any, name: str) -> Any:
        names = self.__dict__.get(_NAMES)
        if names is None or names[0] != _names_generation[0]:
            names = self.__dict__[_NAMES] = (_names_generation[0], {})
        found = names[1].get(name)
        if found is None:
            found = resolve(self, name)
            if isinstance(found, kinds):  # a class, a package or a static method; not a field's value
                names[1][name] = found
        return found

    return lookup


def _path(spark: SparkSession, path: str):  # -> (org.apache.hadoop.fs.FileSystem, org.apache.hadoop.fs.Path)
    jpath = _jvm(spark).org.apache.hadoop.fs.Path(path)
    return jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), jpath


def exists(spark: SparkSession, path: str) -> bool:
    fs, jpath = _path(spark, path)
    return bool(fs.exists(jpath))


def list_names(spark: SparkSession, folder: str) -> list[str]:
    """The names of the entries of ``folder`` ([] when it does not exist)."""
    fs, jpath = _path(spark, folder)
    if not fs.exists(jpath):
        return []
    return [status.getPath().getName() for status in fs.listStatus(jpath)]


def read_text(spark: SparkSession, path: str) -> str | None:
    """The UTF-8 text of the file at ``path``, None when there is none."""
    fs, jpath = _path(spark, path)
    if not fs.exists(jpath):
        return None
    stream = fs.open(jpath)
    try:
        return _jvm(spark).org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to the file at ``path``, replacing it; missing folders are created."""
    fs, jpath = _path(spark, path)
    stream = fs.create(jpath, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def delete(spark: SparkSession, path: str) -> None:
    """Delete the file at ``path`` if there is one."""
    fs, jpath = _path(spark, path)
    if fs.exists(jpath):
        fs.delete(jpath, False)


def file_count(spark: SparkSession, folder: str) -> int:
    """Files under ``folder``, its subfolders included, in one call (Hadoop's content summary)."""
    fs, jpath = _path(spark, folder)
    return int(fs.getContentSummary(jpath).getFileCount())


def checkpoint_delta_log(spark: SparkSession, table_path: str) -> None:
    """Write a Delta log checkpoint of the table's latest version."""
    log = _jvm(spark).org.apache.spark.sql.delta.DeltaLog
    log.forTable(spark._jsparkSession, table_path).checkpoint()


def load_table_state(spark: SparkSession, table_path: str) -> None:
    """Load the latest snapshot of the Delta table at ``table_path`` and compute its state (the
    table's files, its protocol and metadata, the writers' transaction versions), which Delta keeps
    in this JVM for the next reader and writer of that version. Nothing for a path without a table."""
    jvm = _jvm(spark)
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table_path)
    none = jvm.scala.Option.apply(None)
    snapshot = log.update(False, none, none)
    if snapshot.version() >= 0:
        snapshot.setTransactions()


def forget_delta_tables(spark: SparkSession) -> None:
    """Drop what Delta keeps in this JVM of every table it has read (each table's log and snapshots,
    and their cached state): a later reader reads the log again. A run reads a few tables and ends;
    a long-lived session that reads many, the tests', would otherwise keep them all."""
    _jvm(spark).org.apache.spark.sql.delta.DeltaLog.clearCache()


def broadcast_threshold(spark: SparkSession) -> int:
    """``spark.sql.autoBroadcastJoinThreshold`` in bytes, as Spark parsed it (-1: never)."""
    return int(spark._jsparkSession.sessionState().conf().autoBroadcastJoinThreshold())


def plan(df: DataFrame, stage: str = "executed") -> str:
    """The text of ``df``'s ``optimized`` or ``executed`` plan (what a test checks a rewrite by)."""
    execution = df._jdf.queryExecution()
    return (execution.optimizedPlan() if stage == "optimized" else execution.executedPlan()).toString()


def checkpoint_rdd_id(frozen: DataFrame) -> int:
    """The id of the RDD that holds a locally checkpointed frame's rows."""
    return int(frozen._jdf.queryExecution().logical().rdd().id())


def unpersist_rdd(spark: SparkSession, rdd_id: int) -> None:
    """Drop an RDD's blocks without the warning ``RDD.unpersist`` gives for a local checkpoint."""
    spark.sparkContext._jsc.sc().unpersistRDD(rdd_id, False)


@contextmanager
def console_silenced(spark: SparkSession) -> Iterator[None]:
    """Drop what Scala code prints to the console (``println``) in this thread meanwhile.

    Delta's VACUUM prints "Deleted N files and directories in a total of M directories." with
    ``println``, past log4j (its number is in tidemark's maintenance report). Scala's ``Console.out``
    is a per-thread variable, and PySpark runs each Python thread's JVM calls on a thread of its own.
    """
    jvm = _jvm(spark)
    console = jvm.java.lang.Class.forName("scala.Console$")
    field = console.getDeclaredField("outVar")
    field.setAccessible(True)
    out = field.get(console.getField("MODULE$").get(None))  # a scala.util.DynamicVariable
    previous = out.value()
    set_value = getattr(out, "value_$eq")
    set_value(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))
    try:
        yield
    finally:
        set_value(previous)


def newest_query_ids(spark: SparkSession) -> tuple[int, int]:
    """The ids of the newest Spark SQL execution and the newest job this session started (-1 for
    none), once Spark's listener bus has delivered every event: two readings bracket what the work
    between them ran (ids grow by one per execution and per job)."""
    sc = spark.sparkContext._jsc.sc()
    sc.listenerBus().waitUntilEmpty(30_000)  # the status stores are fed by the listener bus
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()  # Scala sequences
    jobs = sc.statusStore().jobsList(None)
    return (
        max((executions.apply(i).executionId() for i in range(executions.size())), default=-1),
        max((jobs.apply(i).jobId() for i in range(jobs.size())), default=-1),
    )


def classes_generated(spark: SparkSession) -> int:
    """How many classes Spark's code generation has compiled in this JVM (Janino's compilations,
    the tasks' too in local mode). A plan whose code is new is compiled, then warmed up by the JIT
    compiler again; one that matches code compiled before reuses its class."""
    metrics = _jvm(spark).org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


@dataclass(frozen=True)
class RecordRules:
    """What ``io.tidemark.contract.RecordCheck`` checks beside the schema: the JSON pointers of the roles
    (event id, entity id, event type: None for none, event time), the properties' pointer, the typed
    columns' pointers (whose JSON texts the check returns), the key rule and the size limits."""

    roles: tuple[str, str, str | None, str]
    properties: str | None
    columns: tuple[str, ...]
    key_is_entity_id: bool
    max_value_bytes: int
    max_entity_id_bytes: int

    def java(self, spark: SparkSession, schema_json: str, max_value_bytes: int | None = None) -> Any:
        """The ``RecordCheck`` of these rules and ``schema_json`` (a JSON Schema)."""
        limit = self.max_value_bytes if max_value_bytes is None else max_value_bytes
        columns = json.dumps(self.columns)
        return _contract(spark).RecordCheck(
            schema_json, *self.roles, self.properties, columns, self.key_is_entity_id, limit, self.max_entity_id_bytes
        )


def register_contract_check(spark: SparkSession, name: str, schema_json: str, rules: RecordRules) -> None:
    """Register the SQL function ``name(key, value)``: a pipeline's contract check of a Kafka record,
    ``io.tidemark.contract.RecordCheck`` (jvm/contract; its struct is ``RecordCheck.RESULT``) of
    ``schema_json`` and ``rules``."""
    spark._jsparkSession.udf().register(name, rules.java(spark, schema_json), _contract(spark).RecordCheck.RESULT)


def register_avro_check(
    spark: SparkSession,
    name: str,
    writers: dict[int, str],
    reader: tuple[int, str],
    rules: RecordRules,
    registry_url: str | None = None,
    registration: str | None = None,
) -> None:
    """Register the SQL function ``name(key, value)``: the contract check of a Kafka record whose value
    is Avro in Confluent's wire format, ``io.tidemark.contract.AvroCheck``: decoded with the writer
    schema its id names in ``writers`` (id: schema text) or, with ``registry_url``, in that registry (the
    tasks fetch each id once a JVM; an id it does not know stays unknown for this ``registration``, default
    ``name``),
    resolved to ``reader`` (the subject's version, its schema text), then checked by ``rules`` as
    :func:`register_contract_check`'s check does. Its struct is ``RecordCheck.RESULT``."""
    # The Avro schema validates the record: the JSON Schema accepts every object. The size limit is
    # the Avro value's, checked before decoding.
    check = rules.java(spark, "{}", max_value_bytes=2**31 - 1)
    contract = _contract(spark)
    version, schema = reader
    by_id = json.dumps({str(k): v for k, v in writers.items()})
    avro = contract.AvroCheck(by_id, schema, version, check, rules.max_value_bytes, registry_url, registration or name)
    spark._jsparkSession.udf().register(name, avro, contract.RecordCheck.RESULT)


def _contract(spark: SparkSession) -> Any:
    """The package of the contract check's classes (jvm/contract)."""
    from py4j.java_gateway import JavaClass

    package = _jvm(spark).io.tidemark.contract
    if not isinstance(package.RecordCheck, JavaClass):  # py4j's JavaPackage: no such class on the classpath
        raise ConfigError("the contract check (jars/contract) is not on Spark's classpath. Run `make jars`.")
    return package
