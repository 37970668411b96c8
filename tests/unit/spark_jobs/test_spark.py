from pathlib import Path

from spark_jobs.runs import unread_records
from spark_jobs.settings import Settings
from spark_jobs.spark import QUICK_COMPILER, QUICK_COMPILER_RECORDS, driver_conf


def java_options(records: int | None, tmp_path: Path) -> list[str]:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)})
    return driver_conf(settings, "local[2]", records)["spark.driver.extraJavaOptions"].split()


def test_a_driver_for_a_run_of_few_records_compiles_with_the_quick_compiler_alone(tmp_path: Path) -> None:
    assert QUICK_COMPILER in java_options(0, tmp_path)
    assert QUICK_COMPILER in java_options(QUICK_COMPILER_RECORDS, tmp_path)
    assert QUICK_COMPILER not in java_options(QUICK_COMPILER_RECORDS + 1, tmp_path)
    assert QUICK_COMPILER not in java_options(None, tmp_path)  # unknown: the JVM's default
    # Spark's log configuration is there either way.
    assert all(any(o.startswith("-Dlog4j2.configurationFile=") for o in java_options(n, tmp_path)) for n in (1, None))


def test_the_records_a_run_will_read_are_unknown_when_postgresql_does_not_answer(tmp_path: Path) -> None:
    # Nothing listens on port 1: the estimate gives up (the run itself then says what is wrong).
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_POSTGRES_PORT": "1"})
    assert unread_records(settings, "events") is None
