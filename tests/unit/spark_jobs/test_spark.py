import os
from pathlib import Path

import pytest

from spark_jobs.settings import Settings
from spark_jobs.spark import (
    CLASS_ARCHIVE_MAGIC,
    CLASS_ARCHIVE_QUIET,
    CONTRACT_JARS,
    QUICK_COMPILER,
    QUICK_COMPILER_CODE_CACHE,
    QUICK_COMPILER_RECORDS,
    REQUIRED_JARS,
    THROUGHPUT_COLLECTOR,
    THROUGHPUT_COLLECTOR_RECORDS,
    class_archive,
    driver_conf,
)
from spark_jobs.store.runs import unread_records


def java_options(records: int | None, tmp_path: Path) -> list[str]:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)})
    return driver_conf(settings, "local[2]", records)["spark.driver.extraJavaOptions"].split()


def test_a_driver_for_a_run_of_few_records_compiles_with_the_quick_compiler_alone(tmp_path: Path) -> None:
    assert QUICK_COMPILER in java_options(0, tmp_path)
    assert QUICK_COMPILER in java_options(QUICK_COMPILER_RECORDS, tmp_path)
    assert QUICK_COMPILER not in java_options(QUICK_COMPILER_RECORDS + 1, tmp_path)
    assert QUICK_COMPILER not in java_options(None, tmp_path)  # unknown: the JVM's default
    # With it, the JVM's default room for compiled code (the quick compiler alone would get 48 MB).
    assert QUICK_COMPILER_CODE_CACHE in java_options(0, tmp_path)
    assert QUICK_COMPILER_CODE_CACHE not in java_options(None, tmp_path)
    # Spark's log configuration is there either way.
    assert all(any(o.startswith("-Dlog4j2.configurationFile=") for o in java_options(n, tmp_path)) for n in (1, None))


def test_a_local_driver_for_a_run_of_many_records_collects_garbage_with_the_throughput_collector(
    tmp_path: Path,
) -> None:
    assert THROUGHPUT_COLLECTOR in java_options(THROUGHPUT_COLLECTOR_RECORDS + 1, tmp_path)
    assert THROUGHPUT_COLLECTOR not in java_options(THROUGHPUT_COLLECTOR_RECORDS, tmp_path)
    assert THROUGHPUT_COLLECTOR not in java_options(None, tmp_path)  # unknown: the JVM's default
    # Below the quick compiler's bound too: the collector is picked on its own measurements.
    both = java_options(QUICK_COMPILER_RECORDS, tmp_path)
    assert THROUGHPUT_COLLECTOR_RECORDS < QUICK_COMPILER_RECORDS and {THROUGHPUT_COLLECTOR, QUICK_COMPILER} <= set(both)
    # A driver on a cluster runs no tasks: it keeps the JVM's collector (measured only in local mode).
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)})
    cluster = driver_conf(settings, "spark://spark:7077", THROUGHPUT_COLLECTOR_RECORDS + 1)
    assert THROUGHPUT_COLLECTOR not in cluster["spark.driver.extraJavaOptions"].split()


def test_the_records_a_run_will_read_are_unknown_when_postgresql_does_not_answer(tmp_path: Path) -> None:
    # Nothing listens on port 1: the estimate gives up (the run itself then says what is wrong).
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_POSTGRES_PORT": "1"})
    assert unread_records(settings, "events") is None


def archive_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    """Settings whose jars and JVM are files under ``tmp_path`` (the digest reads only their size and
    time; which JVM options a driver gets is all this decides)."""
    jdk = tmp_path / "jdk"
    for name in ("bin/java", "lib/server/libjvm.so"):
        (jdk / name).parent.mkdir(parents=True, exist_ok=True)
        (jdk / name).write_text("jvm 1")
    monkeypatch.setenv("JAVA_HOME", str(jdk))
    for name in ("SPARK_CONF_DIR", "SPARK_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR"):  # folders on the class path
        monkeypatch.delenv(name, raising=False)
    for folder, prefixes in (("spark", REQUIRED_JARS), ("contract", CONTRACT_JARS)):
        (tmp_path / "jars" / folder).mkdir(parents=True, exist_ok=True)
        for prefix in prefixes:
            (tmp_path / "jars" / folder / f"{prefix}1.0.jar").write_text("classes")
    return Settings.from_env(
        {"TIDEMARK_HOME": str(tmp_path / "home"), "TIDEMARK_JARS_DIR": str(tmp_path / "jars"), **env}
    )


def archive_options(settings: Settings, master: str = "local[2]", environ: dict[str, str] | None = None) -> list[str]:
    options = driver_conf(settings, master, environ=environ)["spark.driver.extraJavaOptions"].split()
    return [o for o in options if o.startswith(("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit=", "-Xlog:cds"))]


def test_a_submitted_driver_writes_the_class_archive_and_every_later_driver_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = archive_settings(tmp_path, monkeypatch)
    archive = class_archive(settings)
    assert archive is not None and archive.parent == settings.home / "class-archive"
    quiet = list(CLASS_ARCHIVE_QUIET)
    # None yet: the JVM writes it when it exits.
    assert archive_options(settings) == [f"-XX:ArchiveClassesAtExit={archive}", *quiet]
    # Half written (the JVM writes the header last): as if there were none.
    archive.write_bytes(bytes(4096))
    assert archive_options(settings) == [f"-XX:ArchiveClassesAtExit={archive}", *quiet]
    archive.write_bytes(CLASS_ARCHIVE_MAGIC + bytes(4096))
    assert archive_options(settings) == [f"-XX:SharedArchiveFile={archive}", *quiet]
    # A driver elsewhere (a cluster) has no such file; and the setting turns it off.
    assert archive_options(settings, master="spark://spark-master:7077") == []
    assert archive_options(archive_settings(tmp_path, monkeypatch, TIDEMARK_CLASS_ARCHIVE="false")) == []


def test_new_jars_or_a_new_jvm_get_a_new_class_archive_and_the_old_one_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = archive_settings(tmp_path, monkeypatch)
    first = class_archive(settings)
    assert first is not None
    first.parent.mkdir(parents=True)
    first.write_bytes(CLASS_ARCHIVE_MAGIC)
    (tmp_path / "jars" / "spark" / f"{REQUIRED_JARS[0]}1.0.jar").write_text("classes of a rebuilt jar")
    second = class_archive(settings)
    assert second not in (None, first)
    assert archive_options(settings) == [f"-XX:ArchiveClassesAtExit={second}", *CLASS_ARCHIVE_QUIET]
    assert not first.exists()  # no JVM maps it again
    (tmp_path / "jdk" / "lib/server/libjvm.so").write_text("jvm 1.1, updated in place")
    assert class_archive(settings) not in (first, second)
    # A driver with more on its own class path (s3a's jars, run from Python) has an archive of its own.
    assert class_archive(settings, [tmp_path / "jdk" / "bin/java"]) != class_archive(settings)


def test_a_driver_with_a_non_empty_folder_on_its_class_path_gets_no_class_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A JVM told to write or map an archive with a non-empty folder on its class path does not start.
    settings = archive_settings(tmp_path, monkeypatch)
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert archive_options(settings) != []  # an empty folder is no obstacle
    (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 2\n")
    assert archive_options(settings) == []
    # Without SPARK_CONF_DIR, Spark's launcher takes SPARK_HOME's conf, as a Spark install ships it.
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert archive_options(settings) == []
    monkeypatch.delenv("SPARK_HOME")
    assert archive_options(settings) != []
    # Nor SPARK_HOME: a Spark install's spark-submit first on PATH finds its home from where it is.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "spark-submit").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert archive_options(settings) == []
    monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    assert archive_options(settings) != []
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    assert archive_options(settings) == []
    # What counts is the environment spark-submit runs in (an Airflow task's env_vars on top of the worker's).
    monkeypatch.delenv("HADOOP_CONF_DIR")
    submitted = {**os.environ, "YARN_CONF_DIR": str(conf)}
    assert archive_options(settings, environ=submitted) == []
    assert archive_options(settings) != []
