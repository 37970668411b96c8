"""DAG integrity: every DAG file parses with no import errors, no I/O and no heavy imports.

The DagBag is loaded in a fresh interpreter with sockets disabled, the way the dag-processor
parses files: a DAG file that touched the network, a Variable, a Connection or the metadata
database while being parsed would fail here. The DAGs are generated from ``pipelines.yaml``: the
repository's declares the pipeline ``events``, whose DAGs keep the ids they had before pipelines;
a file of three pipelines, one of them broken, gives the DAGs of two and an import error naming the
third.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.settings import PROJECT_ROOT

EXPECTED_DAGS = {
    "tidemark_ingest",
    "tidemark_backfill",
    "tidemark_reconcile",
    "tidemark_repair",
    "tidemark_readmit",
    "tidemark_maintenance",
}
DAG_FILES = EXPECTED_DAGS | {"tidemark_pipelines"}  # the last one only reports the pipelines file's problems
HEAVY_MODULES = ("pyspark", "pandas", "pyarrow", "psycopg2", "confluent_kafka", "delta")
# What parsing may import of tidemark's jobs: the settings and the pipelines file's reader.
LIGHT_JOB_MODULES = {"spark_jobs", "spark_jobs.contract", "spark_jobs.errors", "spark_jobs.pipelines",
                     "spark_jobs.settings"}  # fmt: skip

PARSE = r"""
import json, socket, sys

def refuse(*args, **kwargs):
    raise RuntimeError("a DAG file opened a network connection while being parsed")

socket.socket.connect = refuse
socket.create_connection = refuse

from airflow.dag_processing.dagbag import DagBag

before = set(sys.modules)
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": bag.import_errors,
    "imported": sorted({m.split(".")[0] for m in set(sys.modules) - before}),
    "jobs": sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "spark_jobs"),
    "dags": {
        dag_id: {
            "catchup": dag.catchup,
            "tags": sorted(dag.tags),
            "schedule": getattr(dag.schedule, "expression", None),
            "max_active_runs": dag.max_active_runs,
            "doc": bool(dag.doc_md),
            "tasks": {t.task_id: {"retries": t.retries, "callbacks": bool(t.on_failure_callback),
                                  "at_once": t.max_active_tis_per_dag} for t in dag.tasks},
        }
        for dag_id, dag in bag.dags.items()
    },
}))
"""


def parse(home: Path, **env: str) -> dict:
    """The DagBag of ``dags/`` as the dag-processor sees it, with ``env`` set (no metadata database at all)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")} | env | {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", PARSE, str(PROJECT_ROOT / "dags")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return parse(tmp_path_factory.mktemp("airflow-home"))


def test_every_dag_file_parses_without_errors(parsed: dict) -> None:
    assert parsed["errors"] == {}
    assert set(parsed["dags"]) == EXPECTED_DAGS
    assert {p.stem for p in Path(PROJECT_ROOT / "dags").glob("*.py")} == DAG_FILES


def test_parsing_imports_nothing_heavy(parsed: dict) -> None:
    assert "tidemark_airflow" in parsed["imported"], "the check must see what parsing imports"
    assert not set(parsed["imported"]) & set(HEAVY_MODULES)
    assert "spark_jobs.pipelines" in parsed["jobs"], "the check must see which of the jobs' modules parsing imports"
    assert set(parsed["jobs"]) <= LIGHT_JOB_MODULES


WEB = {
    "name": "web",
    "schedule": "*/5 * * * *",
    "alerts": {"webhook": "web_alerts"},
    "contract": {
        "schema": {
            "type": "object",
            "required": ["messageId", "userId", "timestamp"],
            "properties": {
                "messageId": {"type": "string"},
                "userId": {"type": "string"},
                "timestamp": {"type": "string", "format": "date-time"},
            },
        },
        "event_id": "/messageId",
        "entity_id": "/userId",
        "event_time": "/timestamp",
        "key_is_entity_id": False,
    },
}


def test_each_pipeline_gets_its_dags_and_a_broken_entry_is_an_import_error_naming_it(tmp_path: Path) -> None:
    import yaml

    shipped = yaml.safe_load((PROJECT_ROOT / "pipelines.yaml").read_text())
    orders = {**WEB, "name": "orders", "contract": {**WEB["contract"], "event_time": "/occurred_at"}}
    (tmp_path / "pipelines.yaml").write_text(yaml.safe_dump({"pipelines": [*shipped["pipelines"], WEB, orders]}))
    parsed = parse(tmp_path / "home", TIDEMARK_PIPELINES=str(tmp_path / "pipelines.yaml"))

    # events keeps its DAG ids; web gets its own set; orders none.
    web_dags = {f"{dag_id}__web" for dag_id in EXPECTED_DAGS}
    assert set(parsed["dags"]) == EXPECTED_DAGS | web_dags
    assert parsed["dags"]["tidemark_ingest__web"]["tags"] == ["tidemark", "web"]
    assert parsed["dags"]["tidemark_ingest__web"]["schedule"] == "*/5 * * * *"
    assert parsed["dags"]["tidemark_ingest"]["schedule"] == "*/15 * * * *"
    # The broken entry is one import error, of the file that reports the pipelines file's problems.
    assert list(parsed["errors"]) == [str(PROJECT_ROOT / "dags" / "tidemark_pipelines.py")]
    error = parsed["errors"][str(PROJECT_ROOT / "dags" / "tidemark_pipelines.py")]
    assert (
        "pipelines.yaml: pipeline 'orders': contract.event_time: '/occurred_at' is not a property the schema declares"
        in error
    )
    assert "'web'" not in error and "'events'" not in error


def test_a_pipelines_file_that_cannot_be_read_is_an_import_error_and_no_dag_runs_on_a_guess(tmp_path: Path) -> None:
    (tmp_path / "pipelines.yaml").write_text("pipelines: [\n")
    parsed = parse(tmp_path / "home", TIDEMARK_PIPELINES=str(tmp_path / "pipelines.yaml"))

    assert parsed["dags"] == {}
    assert (
        "pipelines.yaml: not valid YAML at line 2"
        in parsed["errors"][str(PROJECT_ROOT / "dags" / "tidemark_pipelines.py")]
    )


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_DAGS))
def test_dags_do_not_catch_up_retry_alert_and_are_documented(parsed: dict, dag_id: str) -> None:
    dag = parsed["dags"][dag_id]
    assert dag["catchup"] is False
    if dag_id == "tidemark_backfill":
        # A form triggered while a backfill runs is checked at once; the backfills still write one at a time.
        assert dag["max_active_runs"] > 1 and dag["tasks"]["backfill"]["at_once"] == 1
    else:
        assert dag["max_active_runs"] == 1
    assert dag["tags"] == ["events", "tidemark"] and dag["doc"]
    for task_id, task in dag["tasks"].items():
        assert task["callbacks"], f"{dag_id}.{task_id} sends no alert when it fails"
    # Retries everywhere except where a failure is a finding, not a transient error.
    no_retry = {
        "tidemark_backfill": {"plan"},
        "tidemark_reconcile": {"verdict"},
        "tidemark_repair": {"plan", "verdict"},
        "tidemark_readmit": {"plan"},
    }.get(dag_id, set())
    for task_id, task in dag["tasks"].items():
        assert (task["retries"] == 0) == (task_id in no_retry), f"{dag_id}.{task_id} retries={task['retries']}"
