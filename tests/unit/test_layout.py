"""The tree's one rule: the harness (``tidemark``) and the Airflow side (``plugins``) import the
pipeline (``spark_jobs``), never the other way round; DAG files import neither the harness nor Spark;
nothing of the product imports the benchmarks (``benchmarks``, run from the checkout only)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_packages(folder: str) -> dict[str, set[str]]:
    """Top-level package of every import, per file under ``folder``."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("spark_jobs", {"tidemark", "tidemark_airflow", "airflow", "benchmarks"}),
        ("plugins", {"tidemark", "benchmarks"}),
        ("dags", {"tidemark", "pyspark", "spark_jobs", "benchmarks"}),
        ("tidemark", {"benchmarks"}),
    ],
)
def test_imports_run_one_way(folder: str, forbidden: set[str]) -> None:
    offenders = {
        path: sorted(names & forbidden) for path, names in imported_packages(folder).items() if names & forbidden
    }
    assert not offenders, f"{folder} must not import {sorted(forbidden)}: {offenders}"


def test_the_pipeline_neither_starts_servers_nor_benchmarks() -> None:
    pipeline = imported_packages("spark_jobs")
    assert all("subprocess" not in names for names in pipeline.values()), "spark_jobs starts no processes"
    assert not (ROOT / "spark_jobs" / "bench.py").exists() and not (ROOT / "spark_jobs" / "embedded").exists()
