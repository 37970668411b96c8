"""The tree's rules: the harness (``tidemark``) and the Airflow side (``plugins``) import the
pipeline (``spark_jobs``), never the other way round; DAG files import neither the harness nor Spark;
nothing of the product imports the benchmarks (``benchmarks``, run from the checkout only). And no
module of the product is over 400 lines, no function over 60 (docs/contributing.md)."""

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


def module_imports(folders: tuple[str, ...]) -> dict[str, set[str]]:
    """Per module of ``folders`` (dotted; ``plugins/`` holds the package ``tidemark_airflow``), the modules of
    the same tree it imports, wherever the import is: at the top, inside a function or under TYPE_CHECKING."""
    paths = {}
    for folder in folders:
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base if folder == "plugins" else ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            paths[name] = path
    edges: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found = next((t for t in targets if t in paths), None)  # a module, else the package it is in
            for target in {t for t in targets[:-1] if t in paths} | ({found} if found else set()):
                if target != name and not name.startswith(f"{target}."):  # a package's modules may import it
                    edges[name].add(target)
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_even_inside_functions() -> None:
    """A circle hidden behind a function-level import or TYPE_CHECKING is still a circle: two modules that
    need each other are one module, or a third holds what they share."""
    circles = import_circles(module_imports(("spark_jobs", "tidemark", "plugins", "dags", "benchmarks")))
    assert not circles, f"modules that import each other: {circles}"


def test_the_circle_finder_finds_a_circle_through_three_modules() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(edges) == [["a", "b", "c"]]


def test_the_store_reaches_into_no_job() -> None:
    """``spark_jobs/store`` is the record the jobs keep in PostgreSQL: the jobs import it, never the other way."""
    jobs = {"spark_jobs.ingest", "spark_jobs.readmit", "spark_jobs.repair", "spark_jobs.maintenance",
            "spark_jobs.land", "spark_jobs.reconcile", "spark_jobs.writer", "spark_jobs.batch_plan"}  # fmt: skip
    edges = module_imports(("spark_jobs",))
    reaching = {
        name: sorted(t for t in targets if t in jobs or any(t.startswith(f"{job}.") for job in jobs))
        for name, targets in edges.items()
        if name.startswith("spark_jobs.store")
    }
    assert not any(reaching.values()), {name: targets for name, targets in reaching.items() if targets}


PRODUCT = ("spark_jobs", "tidemark", "plugins", "dags", "benchmarks")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """The lines of every module of the product, and of every function (methods and nested ones too, from the
    first decorator to the last line), as ``path`` and ``path:name``."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            text = path.read_text()
            modules[name] = len(text.splitlines())
            for node in ast.walk(ast.parse(text, name)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    key = f"{name}:{node.name}"
                    functions[key] = max(functions.get(key, 0), node.end_lineno - start + 1)
    return modules, functions


def test_no_module_over_400_lines_nor_function_over_60() -> None:
    modules, functions = sizes()
    too_long = [f"{name}: {lines} lines" for name, lines in sorted(modules.items()) if lines > MAX_MODULE_LINES]
    too_long += [f"{name}: {lines} lines" for name, lines in sorted(functions.items()) if lines > MAX_FUNCTION_LINES]
    assert not too_long, (
        f"split into named steps (modules <= {MAX_MODULE_LINES}, functions <= {MAX_FUNCTION_LINES}): {too_long}"
    )
