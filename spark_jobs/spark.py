"""The SparkSession every tidemark job uses: Delta enabled, the Kafka connector from the local jar cache."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from spark_jobs import jvm
from spark_jobs.errors import ConfigError
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REQUIRED_JARS = ("spark-sql-kafka-0-10_2.13-", "delta-spark_4.2_2.13-", "kafka-clients-")
CONTRACT_JARS = ("tidemark-contract-", "json-schema-validator-")
S3A_JARS = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")
CODEGEN_CACHE_ENTRIES = 2000
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
LISTING_TASKS_PER_CORE = 4  # listing waits on storage more than it computes
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
# HotSpot compiles hot code first with profiling (C1, tiers 2 and 3), then optimised (C2, tier 4). A
# scheduled run is a JVM of its own whose batch runs some thirty short Spark queries once: most of
# its time is spent in profiled code that never reaches C2. With the quick compiler alone a cold run
# of up to a few hundred thousand records took 10 to 25% less time on 2 cores, and one of a million
# more (docs/design.md, "Performance: what is measured").
QUICK_COMPILER = "-XX:TieredStopAtLevel=1"
QUICK_COMPILER_RECORDS = 500_000
# With the quick compiler alone HotSpot also shrinks its code cache to a client JVM's 48 MB (240 MB
# otherwise). A cold scheduled run of 2,000 records fills 38 MB of it with Spark's compiled code and
# the queries' generated classes; a run of 400,000 records in nine batches filled it, and the JVM
# stopped compiling ("CodeCache is full. Compiler has been disabled") or failed a batch ("Out of
# space in CodeCache for method handle intrinsic"). The driver keeps the default room.
QUICK_COMPILER_CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"
# A local driver runs the tasks too, so its garbage collector works as hard as the run is large: on 2
# cores the JVM picks G1, whose concurrent threads and write barriers cost more than the throughput
# collector's pauses. Cold scheduled runs (the bench's collector stage, medians of three alternated
# pairs) took 7% less time with it at 300,000 and 6% at 1,000,000 records, 2% at 100,000, and 2% more
# at 20,000 (JDK 17 maps the Java objects archived with its classes only under G1; docs/design.md).
THROUGHPUT_COLLECTOR = "-XX:+UseParallelGC"
THROUGHPUT_COLLECTOR_RECORDS = 100_000
# Java's class-data sharing: a driver JVM loads and verifies about 18,000 classes (a trivial job;
# more for a batch) of Spark, Scala, Delta and Kafka, most of them parsed from their jars, seconds
# of every cold run on 2 cores. A JVM started with -XX:ArchiveClassesAtExit writes the classes it
# loaded into an archive when it exits; one started with -XX:SharedArchiveFile maps them from it
# instead (docs/design.md, "Performance: what is measured"). The JVM checks an archive against its
# own version and class path and ignores one that does not match; the archive's name is a digest
# of both, so new jars or a new JDK get a new one.
CLASS_ARCHIVE_DIR = "class-archive"
MAP_CLASSES, WRITE_CLASSES = "-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit="  # each followed by the archive
# The JVM writes an archive's header, which starts with this magic, after everything else: a file
# without it is one a JVM is still writing, or one whose writer was killed.
CLASS_ARCHIVE_MAGIC = bytes.fromhex("a8ab0bf0")  # 0xf00baba8, a dynamic archive, little-endian
# The JVM logs each class it cannot archive (hundreds) on stdout, where a job's output goes.
CLASS_ARCHIVE_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
# Spark's launcher puts these folders on a driver's class path (the configuration folder is
# SPARK_CONF_DIR, else SPARK_HOME's conf). A JVM cannot archive classes with a non-empty folder there:
# told to write an archive it does not start ("Cannot have non-empty directory in paths").
CLASS_PATH_FOLDERS = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR")


def _cached(directory: Path, prefixes: tuple[str, ...], target: str) -> list[Path]:
    jars = sorted(directory.glob("*.jar"))
    missing = [prefix for prefix in prefixes if not any(j.name.startswith(prefix) for j in jars)]
    if missing:
        raise ConfigError(f"jars missing in {directory} ({', '.join(m.rstrip('-') for m in missing)}). Run `{target}`.")
    return jars


def on_s3a(settings: Settings) -> bool:
    """Whether the lake or the checkpoints are on S3 (or an S3-compatible store) through s3a."""
    return any(root.startswith("s3a://") for root in (settings.lake_root, settings.checkpoint_root))


def object_store_jars(settings: Settings) -> list[Path]:
    """hadoop-aws and the AWS SDK when the lake or the checkpoints are on ``s3a://`` (`make jars-s3`)."""
    return _cached(settings.jars_dir / "s3", S3A_JARS, "make jars-s3") if on_s3a(settings) else []


def spark_jars(settings: Settings) -> list[Path]:
    """The jars a tidemark job needs from the cache: Kafka connector, Delta, the contract check
    (built from jvm/contract), and s3a when used."""
    return (
        _cached(settings.jars_dir / "spark", REQUIRED_JARS, "make jars")
        + _cached(settings.jars_dir / "contract", CONTRACT_JARS, "make jars")
        + object_store_jars(settings)
    )


def broadcastable(spark: SparkSession, rows: int, row_bytes: int) -> bool:
    """Whether ``rows`` rows of about ``row_bytes`` each are small enough for Spark to broadcast to a
    join (``spark.sql.autoBroadcastJoinThreshold``; -1 never). Spark decides this itself from its
    size estimate, but a frame read from Kafka has none, so it shuffles both sides of the join: for
    a frame whose size the caller knows, this is the decision Spark would make if it knew."""
    threshold = jvm.broadcast_threshold(spark)
    return 0 <= rows * row_bytes <= threshold


SESSION_OPTIONS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # Delta's default of 50 partitions for reading its log is slow on small machines.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Delta 4.4 lists a small table's files in each commit's checksum file, only to list them in
    # the next one, and where the JVM's or the session's time zone is not UTC it checks that
    # list after every commit by rebuilding the table's whole state: two Spark executions a
    # commit, and a state nothing reads when the run ends. No read uses the list.
    "spark.databricks.delta.allFilesInCrc.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # PySpark notes the Python line of every column and function call for errors about DataFrame
    # code: five gateway calls and a walk of the stack each (F.col 1.9 ms against 0.7).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark keeps 100 compiled query classes by default; one batch compiles 200 to 300, so each
    # batch of a run compiled them all again (about 2 s a batch on 2 cores). With room for them,
    # a run's later batches compile only the few plans whose literals changed.
    "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
    # Kafka's SASL login (kafka.sasl.jaas.config) is a source option: masked wherever Spark shows options.
    "spark.sql.redaction.options.regex": "(?i)url|password|secret|jaas|token",
}


def build_session(settings: Settings, app_name: str, records: int | None = None) -> SparkSession:
    """Get or create the SparkSession for a tidemark job.

    Under spark-submit the master and jars come from the submit command; run from Python (the CLI,
    tests) it is ``settings.spark_master`` (``TIDEMARK_SPARK_MASTER``, default ``local[2]``) with
    the cached jars, and a JVM started for a run of ``records`` records (:func:`driver_conf`).
    """
    from pyspark.sql import SparkSession

    options = {**SESSION_OPTIONS, "spark.sql.shuffle.partitions": str(settings.shuffle_partitions)}
    # pyspark sets PYSPARK_GATEWAY_PORT when spark-submit started this process; then the submit
    # command's --name (the Airflow task's) names the application.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = settings.spark_master
        jars, store = spark_jars(settings), []
        if master.startswith("local"):
            # One JVM: the s3a jars (the AWS SDK bundle is 690 MB) go on its class path instead of
            # being copied into every session's spark.jars directory.
            store = object_store_jars(settings)
            jars = [j for j in jars if j not in store]
            if store:
                options["spark.driver.extraClassPath"] = ":".join(str(j) for j in store)
        conf = driver_conf(settings, master, records, class_path=store)
        options |= {"spark.app.name": app_name, "spark.master": master, **conf}
        options |= {"spark.jars": ",".join(str(j) for j in jars), "spark.driver.memory": settings.driver_memory}
        # Python workers must run this interpreter (the venv), not whatever python3 is on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        start_jvm(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    jvm.remember_names()
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    # Delta's VACUUM lists a table in as many tasks as this says: Spark's default is 10,000 however
    # small the table (25 s a VACUUM on 2 cores). A few per core of the cluster, unless the submit
    # command or spark-defaults.conf sets it.
    if spark.sparkContext.getConf().get(LISTING_PARALLELISM) is None:
        spark.conf.set(LISTING_PARALLELISM, str(LISTING_TASKS_PER_CORE * spark.sparkContext.defaultParallelism))
    return spark


# The JVM's notice of the incubator module Spark's launcher always adds (``--add-modules`` in its
# JavaModuleOptions): printed on every start, and no option turns it off.
JVM_INCUBATOR_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def start_jvm(options: dict[str, str]) -> None:
    """Start Spark's JVM as pyspark would (``spark-submit pyspark-shell`` with ``options``), passing its
    standard error on without :data:`JVM_INCUBATOR_NOTICE`. Nothing when this process has a JVM already."""
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    read_end, write_end = os.pipe()
    try:
        gateway = launch_gateway(SparkConf().setAll(list(options.items())), popen_kwargs={"stderr": write_end})
    finally:
        os.close(write_end)  # the JVM has its copy
    notice = JVM_INCUBATOR_NOTICE.encode()

    def pass_on() -> None:  # the JVM's standard error, a line at a time, onto this process's
        with os.fdopen(read_end, "rb") as stream:
            for line in stream:
                if line.rstrip(b"\r\n") != notice:
                    os.write(2, line)

    threading.Thread(target=pass_on, name="spark-stderr", daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)
    if WRITE_CLASSES in options.get("spark.driver.extraJavaOptions", ""):
        atexit.register(_exit_jvm, gateway.proc)


def _exit_jvm(jvm_process: Any) -> None:
    """Stop Spark and let its JVM (pyspark's ``Popen``) exit before this process does: a JVM that
    writes the class archive does so when it exits, and the next run must not find it half written."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    jvm_process.stdin.close()  # pyspark's JVM exits when its standard input ends
    deadline = time.monotonic() + 120
    while jvm_process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def driver_conf(
    settings: Settings,
    master: str,
    records: int | None = None,
    class_path: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What a tidemark driver sets however it starts (from Python, or spark-submitted by a DAG): the
    Spark UI only when ``TIDEMARK_SPARK_UI`` asks for it, Spark's log lines at
    ``TIDEMARK_SPARK_LOG_LEVEL``, a local driver on loopback only (nothing outside this machine
    needs to reach it) and with the class archive (:func:`class_sharing`), and for a run known to
    read at most :data:`QUICK_COMPILER_RECORDS` ``records``, HotSpot's quick compiler alone; for a
    local run known to read more than :data:`THROUGHPUT_COLLECTOR_RECORDS`, the throughput collector.
    ``class_path``: jars on the driver's own class path beyond Spark's; ``environ``: the environment
    spark-submit will run in (default: this process's).
    """
    # Spark's own log lines at TIDEMARK_SPARK_LOG_LEVEL from the driver's start (spark_jobs/log4j2.properties).
    java = [
        f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
        f"-Dtidemark.spark.log.level={settings.spark_log_level}",
    ]
    if records is not None and records <= QUICK_COMPILER_RECORDS:
        java += [QUICK_COMPILER, QUICK_COMPILER_CODE_CACHE]
    conf = {"spark.ui.enabled": str(settings.spark_ui).lower()}
    if master.startswith("local"):
        conf |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        if records is not None and records > THROUGHPUT_COLLECTOR_RECORDS:
            java.append(THROUGHPUT_COLLECTOR)
        java += class_sharing(settings, class_path, environ)
    return conf | {"spark.driver.extraJavaOptions": " ".join(java)}


def class_sharing(
    settings: Settings, class_path: Sequence[Path] = (), environ: Mapping[str, str] | None = None
) -> list[str]:
    """The JVM options that let a local driver map its classes from the class archive when one is
    complete, and otherwise write it when the JVM exits (spark-submit returns after that; a JVM
    started for this Python process is waited for when it exits, :func:`start_jvm`). Nothing when
    ``TIDEMARK_CLASS_ARCHIVE`` is false, Java is not found, a non-empty folder is on the driver's class
    path (:func:`folder_on_class_path`), or the archive's folder cannot be written.
    """
    if not settings.class_archive or folder_on_class_path(environ) is not None:
        return []
    archive = class_archive(settings, class_path, environ)
    if archive is None:
        return []
    if archive_complete(archive):
        return [f"{MAP_CLASSES}{archive}", *CLASS_ARCHIVE_QUIET]
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        for old in archive.parent.glob("*.jsa"):  # an earlier JDK's or jars' archive: no JVM maps it again
            if old != archive:
                old.unlink(missing_ok=True)
    except OSError:
        return []
    return [f"{WRITE_CLASSES}{archive}", *CLASS_ARCHIVE_QUIET]


def folder_on_class_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The first non-empty folder Spark's launcher puts on a driver's class path (:data:`CLASS_PATH_FOLDERS`)
    in ``environ`` (default: this process's environment), if there is one: then the driver gets no
    class archive."""
    import pyspark

    env = os.environ if environ is None else environ
    # Without SPARK_HOME, spark-submit finds its home from where it is: pyspark's folder for the one
    # pip installs, the install's for a Spark distribution's on PATH.
    submit = shutil.which("spark-submit", path=env.get("PATH"))
    homes: list[str | Path] = [env["SPARK_HOME"]] if env.get("SPARK_HOME") else [Path(pyspark.__file__).parent]
    if not env.get("SPARK_HOME") and submit:
        homes.append(Path(submit).resolve().parent.parent)
    candidates: dict[str, list[str | Path]] = {name: [env[name]] for name in CLASS_PATH_FOLDERS if env.get(name)}
    candidates.setdefault("SPARK_CONF_DIR", [Path(home, "conf") for home in homes])
    for folder in (Path(f) for folders in candidates.values() for f in folders):
        if folder.is_dir() and any(folder.iterdir()):
            return folder
    return None


def class_archive(
    settings: Settings, class_path: Sequence[Path] = (), environ: Mapping[str, str] | None = None
) -> Path | None:
    """Where the class archive of a driver of ``settings`` is kept: named by a digest of the JVM
    spark-submit runs (``JAVA_HOME``'s, else the ``java`` on PATH), Spark's jars, tidemark's jars
    and ``class_path``, each by path, size and modification time, and the configuration folders
    Spark's launcher adds to the class path. None when no Java is found."""
    import pyspark

    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else shutil.which("java", path=env.get("PATH"))
    if java is None or not Path(java).exists():
        return None
    java = Path(java).resolve()
    server = java.parent.parent / "lib" / "server" / "libjvm.so"  # a JDK updated in place keeps its path
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    try:
        parts = [java, server if server.exists() else java, *jars, *spark_jars(settings), *class_path]
        described = "\n".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in parts)
        # Spark's launcher puts these folders on the class path too.
        described += "".join(f"\n{name}={env.get(name, '')}" for name in CLASS_PATH_FOLDERS)
    except (OSError, ConfigError):  # a missing jar: the job itself says what to do
        return None
    digest = hashlib.sha256(described.encode()).hexdigest()[:16]
    return settings.home / CLASS_ARCHIVE_DIR / f"spark-driver-{digest}.jsa"


def archive_complete(archive: Path) -> bool:
    """Whether ``archive`` is a whole class archive (its header, which the JVM writes last, is there)."""
    try:
        with archive.open("rb") as stream:
            return stream.read(len(CLASS_ARCHIVE_MAGIC)) == CLASS_ARCHIVE_MAGIC
    except OSError:
        return False


class FrozenFrames:
    """Frames one unit of work (a batch) freezes with ``localCheckpoint``, released when it ends.

    A local checkpoint keeps its rows in the block manager (the driver's heap, when Spark runs in
    local mode) until Spark's cleaner finds its RDD unreachable, which a driver that runs many
    batches may not see in time: the 500-run soak's driver, one SparkSession for all runs, ran out
    of heap at run 487. Released, a frame's rows are gone and its lineage is truncated, so it must
    not be read again.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._rdd_ids: list[int] = []

    def freeze(self, df: DataFrame) -> DataFrame:
        """``df`` computed now and kept as it is, whatever its sources become."""
        frozen = df.localCheckpoint(eager=True)
        self._rdd_ids.append(jvm.checkpoint_rdd_id(frozen))
        return frozen

    def freeze_counted(
        self, df: DataFrame, *aggregates: Column, keep: list[str] | None = None
    ) -> tuple[DataFrame, dict[str, Any]]:
        """:meth:`freeze` ``df`` (only its ``keep`` columns, when given), and ``aggregates`` over its
        rows (named columns), observed while it is computed: they cost no Spark job of their own
        (``DataFrame.observe``)."""
        from pyspark.sql import Observation

        counted = df.observe(observed := Observation(), *aggregates)
        frozen = self.freeze(counted if keep is None else counted.select(*keep))
        return frozen, observed.get

    def __enter__(self) -> FrozenFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        # SparkContext.unpersistRDD is what RDD.unpersist calls after warning that a local
        # checkpoint cannot be recomputed: frames are released on purpose, so without the warning.
        while self._rdd_ids:
            jvm.unpersist_rdd(self._spark, self._rdd_ids.pop())


T = TypeVar("T")
U = TypeVar("U")


def run_both(first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
    """:func:`run_concurrently` of two steps whose results differ in type: both in threads, both waited
    for, the first failure raised; their results."""
    results: list[Any] = run_concurrently([first, second])
    return results[0], results[1]


def run_concurrently(steps: list[Callable[[], T]]) -> list[T]:
    """Run Spark/Delta steps in threads (one Spark job queue each); wait for all, raise the first
    failure; their results, in order."""
    if len(steps) <= 1:
        return [step() for step in steps]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="tidemark-spark") as pool:
        futures = [pool.submit(step) for step in steps]
    return [future.result() for future in futures]
