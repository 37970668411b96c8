"""What a command that starts Spark prints: tidemark's own lines, and Spark's only when asked for.

Each command runs as the user runs it: the installed ``tidemark`` script, in a child process.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from spark_jobs.settings import Settings
from spark_jobs.spark import (
    QUICK_COMPILER,
    QUICK_COMPILER_RECORDS,
    THROUGHPUT_COLLECTOR_RECORDS,
    archive_complete,
    class_archive,
)
from tests.integration.spark_jobs.checks import driver_jvm_options
from tests.integration.tidemark.test_errors import environment, tidemark, tidemark_watched
from tidemark.producer import ProduceSpec, produce

pytestmark = pytest.mark.operations  # make test-operations


def spark_lines(stderr: str) -> list[str]:
    return stderr.splitlines()


def test_ingest_prints_its_summary_and_no_spark_log_lines_unless_verbose(stack: Settings, tmp_path: Path) -> None:
    topic = f"quiet-{uuid.uuid4().hex[:10]}"
    produce(stack, ProduceSpec(count=20, entities=2), topic=topic, partitions=1)
    env = {
        **stack.to_env(),
        "TIDEMARK_LAKE_ROOT": str(tmp_path / "lake"),
        "TIDEMARK_CHECKPOINT_ROOT": str(tmp_path / "cp"),
        "TIDEMARK_HOME": str(tmp_path / "home"),  # its own: no class archive yet
    }

    quiet, commands, _ = tidemark_watched(["ingest", "--topic", topic], env, tmp_path)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stdout.startswith(f"ingest:{topic} batch 0: read 20 = accepted 20"), quiet.stdout
    assert spark_lines(quiet.stderr) == [], f"Spark's log lines leaked: {quiet.stderr[:3000]}"
    # A run of 20 records: the JVM it started compiles with HotSpot's quick compiler alone.
    assert QUICK_COMPILER in driver_jvm_options(commands), commands
    # The first driver here wrote the class archive as its JVM exited, before the command returned
    # (and said nothing of the classes it could not archive).
    archive = class_archive(Settings.from_env(environment(env, tmp_path)))
    assert archive is not None and f"-XX:ArchiveClassesAtExit={archive}" in driver_jvm_options(commands), commands
    assert archive_complete(archive), archive

    # Maintenance prints its report, and not Delta's own "Deleted N files ..." line for each table;
    # its JVM maps the classes from the archive, and compiles with the quick compiler: the pipeline
    # stores 20 records, all a maintenance reads at most.
    maintained, commands, mapped = tidemark_watched(["maintain"], env, tmp_path)
    assert f"-XX:SharedArchiveFile={archive}" in driver_jvm_options(commands), commands
    assert QUICK_COMPILER in driver_jvm_options(commands), commands
    assert str(archive) in mapped, mapped  # beside the JDK's own
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    assert "Deleted" not in maintained.stdout and "events:" in maintained.stdout, maintained.stdout
    assert spark_lines(maintained.stderr) == [], f"Spark's log lines leaked: {maintained.stderr[:3000]}"

    # --verbose shows Spark's warnings (a streaming query always warns that it turns adaptive execution off).
    verbose = tidemark(["ingest", "--topic", topic, "--verbose"], env, tmp_path)
    assert verbose.returncode == 0 and verbose.stdout == "no new records\n", verbose.stdout + verbose.stderr[-3000:]
    assert " WARN ResolveWriteToStream: " in verbose.stderr, verbose.stderr[-3000:]


def test_a_driver_with_a_spark_configuration_folder_on_its_class_path_runs_without_the_class_archive(
    stack: Settings, tmp_path: Path, monkeypatch
) -> None:
    """Spark's launcher puts its configuration folder (SPARK_CONF_DIR, else SPARK_HOME's conf: every
    Spark install has one) on the driver's class path, and a JVM cannot archive its classes with a
    non-empty folder there: told to, it does not start ("Cannot have non-empty directory in paths")."""
    from benchmarks.workloads import spark_submit
    from spark_jobs import ingest

    topic = f"conf-{uuid.uuid4().hex[:10]}"
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 2\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    env = {
        **stack.to_env(),
        "TIDEMARK_TOPIC": topic,
        "TIDEMARK_LAKE_ROOT": str(tmp_path / "lake"),
        "TIDEMARK_CHECKPOINT_ROOT": str(tmp_path / "cp"),
        "TIDEMARK_HOME": str(tmp_path / "home"),
        "SPARK_CONF_DIR": str(conf),
    }
    settings = Settings.from_env(environment(env, tmp_path))
    archives = settings.home / "class-archive"

    # As a DAG's task runs it: spark-submit with the driver options the operator gives.
    produce(stack, ProduceSpec(count=5, entities=1, seed=1), topic=topic, partitions=1)
    out = spark_submit(settings, Path(ingest.__file__), ["scheduled"], records=5)
    assert f"ingest:{topic} batch 0: read 5 = accepted 5" in out, out
    # From the command line: the JVM tidemark starts for itself.
    produce(stack, ProduceSpec(count=5, entities=1, seed=2), topic=topic, partitions=1)
    done, commands, mapped = tidemark_watched(["ingest", "--topic", topic], env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"ingest:{topic} batch 1: read 5 = accepted 5"), done.stdout
    options = driver_jvm_options(commands)
    assert not [o for o in options if o.startswith(("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit="))], options
    assert not [m for m in mapped if m.startswith(str(archives))], mapped  # the JDK's own only
    assert not (archives.exists() and list(archives.iterdir()))


@pytest.mark.scenario
def test_the_demo_shows_a_replay_that_changes_nothing_and_a_second_pipeline_with_sessions_cut_by_arrival(
    database: Settings, tmp_path: Path
) -> None:
    """`make demo` as a new user runs it: the installed script, the repository's pipelines file."""
    import os
    import subprocess

    from tests.integration.tidemark.test_errors import TIDEMARK

    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")} | database.to_env() | {
        "TIDEMARK_HOME": str(tmp_path),
        "TIDEMARK_TOPIC": f"demo-{uuid.uuid4().hex[:10]}",
        "TIDEMARK_LAKE_ROOT": str(tmp_path / "lake"),
        "TIDEMARK_CHECKPOINT_ROOT": str(tmp_path / "cp"),
    }  # fmt: skip
    try:
        demo = [TIDEMARK, "demo", "--count", "1000"]
        done = subprocess.run(demo, env=env, capture_output=True, text=True, timeout=900)
    finally:  # what the demo started in its home (the schema registry, when no registry answered): `make down`
        stopped = subprocess.run([TIDEMARK, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    out = done.stdout
    assert "6. sinks after the replay are IDENTICAL" in out, out
    assert "7. a second pipeline, 'web'" in out and "   reconcile: OK" in out, out
    assert "   quarantined " in out, out  # web's malformed records, by reason
    # One visitor's sessions: records sent in waves longer apart than web's gap make one session a wave.
    table = out.split("(a new one after 6 s idle):\n")[1].split("\n\n")[0].splitlines()
    assert table[0].split()[:2] == ["session_id", "started_at"], table
    assert len(table) - 1 >= 2, out
    # A late record (event time hours before its arrival) joined one of them by its arrival.
    late = re.search(r"a late record of this visitor: event time .*, (\d+) h before it arrived; it joined (\S+)", out)
    assert late and int(late[1]) >= 1, out
    assert late[2] in [line.split()[0] for line in table[1:]], out
    # A producer release the contract does not know: quarantined, then readmitted after the contract's fix.
    assert "8. the web producer's new release sends 'Checkout Started'" in out, out
    assert re.search(r"schema: enum at /event: .*: \d+ quarantined, 12 would come back", out), out
    assert re.search(r"schema: enum at /event: .*: \d+ quarantined, 12 came back", out), out
    assert "   reconcile after the readmit: OK" in out, out
    # An Avro pipeline: its records through the registry, a schema evolution, and a record of a schema the
    # registry did not know, quarantined, then readmitted once the schema is registered.
    avro = out.split("9. an Avro pipeline, 'orders'")[1]
    assert "produced" in avro and "with version 1 (orders.avsc)" in avro, out
    assert "a new version of the schema (a field added with a default): version 2" in avro, out
    assert re.search(r"unknown_schema: schema id \d+ is not in the registry: 1 quarantined, 1 came back", avro), out
    assert "   reconcile: OK" in avro, out
    assert spark_lines(done.stderr) == [], done.stderr[-3000:]


JVM_OPTIONS_APP = """
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
jvm = spark.sparkContext._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
)
for name in ("TieredStopAtLevel", "ReservedCodeCacheSize", "UseParallelGC", "UseG1GC"):
    print(name, bean.getVMOption(name).getValue())
print("rows", spark.range(1000).selectExpr("sum(id)").first()[0])
spark.stop()
"""


def test_a_driver_that_compiles_with_the_quick_compiler_alone_has_the_jvms_full_room_for_compiled_code(
    stack: Settings, tmp_path: Path
) -> None:
    """HotSpot gives a JVM with its quick compiler alone a 48 MB code cache (its client default)
    instead of 240 MB. A cold scheduled run of 2,000 records fills 38 MB of it; a run of 400,000 in
    nine batches filled it, and the JVM stopped compiling ("CodeCache is full. Compiler has been
    disabled") or failed a batch ("Out of space in CodeCache for method handle intrinsic")."""
    import subprocess

    # As a DAG's task submits a scheduled run known to read few records.
    options = submitted_jvm_options(stack, tmp_path, records=100)
    assert options.get("TieredStopAtLevel") == "1", options  # the quick compiler alone
    assert options.get("UseParallelGC") == "false", options  # and the JVM's own collector
    flags = subprocess.run(["java", "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True)
    default = re.search(r"\bReservedCodeCacheSize\s+=\s+(\d+)", flags.stdout)
    assert default, flags.stdout[-2000:]
    assert options.get("ReservedCodeCacheSize") == default.group(1), (options, default.group(1))


def submitted_jvm_options(stack: Settings, tmp_path: Path, records: int) -> dict[str, str]:
    """The JVM options of a driver submitted as a DAG's task submits a run of about ``records``
    records: those :data:`JVM_OPTIONS_APP` printed, once it ran a Spark job under them."""
    from benchmarks.workloads import spark_submit

    app = tmp_path / "jvm_options.py"
    app.write_text(JVM_OPTIONS_APP)
    settings = Settings.from_env(environment({**stack.to_env(), "TIDEMARK_HOME": str(tmp_path / "home")}, tmp_path))
    out = spark_submit(settings, app, [], records=records)
    assert "rows 499500" in out.splitlines(), out
    return dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("Tiered", "Reserved", "Use")))


def test_a_local_driver_for_a_run_of_many_records_collects_garbage_with_the_throughput_collector(
    stack: Settings, tmp_path: Path
) -> None:
    """On 2 cores the JVM picks G1; a local driver that runs a large run's tasks spent 6 to 7% less
    time with the throughput collector (cold runs of 300,000 and 1,000,000 records)."""
    # As a DAG's task submits a scheduled run known to read more than the quick compiler's limit.
    options = submitted_jvm_options(stack, tmp_path, records=QUICK_COMPILER_RECORDS + 1)
    assert options.get("UseParallelGC") == "true" and options.get("UseG1GC") == "false", options
    assert options.get("TieredStopAtLevel") == "4", options  # and every compiler tier
    # A run of fewer: the quick compiler alone, and the throughput collector with it.
    options = submitted_jvm_options(stack, tmp_path, records=THROUGHPUT_COLLECTOR_RECORDS + 1)
    assert options.get("UseParallelGC") == "true" and options.get("TieredStopAtLevel") == "1", options
