"""DAG integrity: every DAG file parses with no import errors, no I/O and no heavy imports.

The DagBag is loaded in a fresh interpreter with sockets disabled, the way the dag-processor
parses files: a DAG file that touched the network, a Variable, a Connection or the metadata
database while being parsed would fail here. The DAGs are generated from ``pipelines.yaml``: the
repository's declares the pipeline ``events``, whose DAGs keep the ids they had before pipelines;
a file of three pipelines, one of them broken (its contract, or its YAML), gives the DAGs of all three,
those of the broken one saying its problem, and an import error naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
LIGHT_JOB_MODULES = {"spark_jobs", "spark_jobs.contract", "spark_jobs.contract_schema", "spark_jobs.errors",
                     "spark_jobs.pipeline_names", "spark_jobs.pipeline_options", "spark_jobs.pipelines",
                     "spark_jobs.pipelines_check", "spark_jobs.pipelines_file", "spark_jobs.pipelines_schema",
                     "spark_jobs.settings", "spark_jobs.settings_parsers",
                     "spark_jobs.store", "spark_jobs.store.quarantine"}  # fmt: skip

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
            "doc": dag.doc_md,
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


WEB: dict[str, Any] = {
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


def declare(tmp_path: Path, *entries: dict) -> Path:
    """A pipelines file of today's ``events`` and ``entries``."""
    import yaml

    shipped = yaml.safe_load((PROJECT_ROOT / "pipelines.yaml").read_text())
    (tmp_path / "pipelines.yaml").write_text(yaml.safe_dump({"pipelines": [*shipped["pipelines"], *entries]}))
    return tmp_path / "pipelines.yaml"


def test_each_pipeline_gets_its_dags_and_a_broken_entry_keeps_its_own_saying_why(tmp_path: Path) -> None:
    orders = {**WEB, "name": "orders", "contract": {**WEB["contract"], "event_time": "/occurred_at"}}
    parsed = parse(tmp_path / "home", TIDEMARK_PIPELINES=str(declare(tmp_path, WEB, orders)))

    # events keeps its DAG ids; web and orders get their own sets.
    web_dags = {f"{dag_id}__web" for dag_id in EXPECTED_DAGS}
    orders_dags = {f"{dag_id}__orders" for dag_id in EXPECTED_DAGS}
    assert set(parsed["dags"]) == EXPECTED_DAGS | web_dags | orders_dags
    assert parsed["dags"]["tidemark_ingest__web"]["tags"] == ["tidemark", "web"]
    assert parsed["dags"]["tidemark_ingest__web"]["schedule"] == "*/5 * * * *"
    assert parsed["dags"]["tidemark_ingest"]["schedule"] == "*/15 * * * *"
    # The broken entry is one import error, of the file that reports the pipelines file's problems...
    assert list(parsed["errors"]) == [str(PROJECT_ROOT / "dags" / "tidemark_pipelines.py")]
    error = parsed["errors"][str(PROJECT_ROOT / "dags" / "tidemark_pipelines.py")]
    line = "pipelines.yaml: pipeline 'orders': contract.event_time: '/occurred_at' is not a property the schema "
    line += "declares"
    assert line in error
    assert "'web'" not in error and "'events'" not in error
    # ... and the first thing each of its DAGs says (their runs fail with it: test_airflow_dags.py).
    for dag_id in orders_dags:
        assert parsed["dags"][dag_id]["doc"].startswith("**Every run of this pipeline fails until its entry"), dag_id
        assert line in parsed["dags"][dag_id]["doc"], dag_id
    assert not parsed["dags"]["tidemark_ingest__web"]["doc"].startswith("**Every run")


def test_an_entry_that_is_not_yaml_is_its_pipelines_problem_and_the_others_load(tmp_path: Path) -> None:
    """One unbalanced quote in one entry: YAML has no document; the entry is set aside as its pipeline's problem
    and the rest of the file is read without it."""
    path = declare(tmp_path, WEB, {**WEB, "name": "orders", "topic": "orders-v1"})
    text = path.read_text()
    assert text.count("topic: orders-v1") == 1
    path.write_text(text.replace("topic: orders-v1", 'topic: "orders-v1'))  # the quote is never closed
    parsed = parse(tmp_path / "home", TIDEMARK_PIPELINES=str(path))

    assert {dag_id for dag_id in parsed["dags"] if not dag_id.endswith("__orders")} == EXPECTED_DAGS | {
        f"{dag_id}__web" for dag_id in EXPECTED_DAGS
    }
    error = parsed["errors"][str(PROJECT_ROOT / "dags" / "tidemark_pipelines.py")]
    assert "pipelines.yaml: pipeline 'orders': not valid YAML at line " in error
    assert "while scanning a quoted scalar begun at line " in error
    assert "'web'" not in error and "'events'" not in error
    assert "not valid YAML" in parsed["dags"]["tidemark_ingest__orders"]["doc"]


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
