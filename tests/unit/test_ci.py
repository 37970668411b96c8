"""CI runs the README's test suite, and that suite runs every test whatever its markers: a marker that
moves tests out of one target (``scenario``, out of ``make test``) must move them into another."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from _pytest.mark.expression import Expression

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()


def make_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("make ")]


def readme_blocks() -> list[list[str]]:
    """The make commands of each code block of the README's "Tests" section."""
    tests = (ROOT / "README.md").read_text().split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    return [make_lines(block.split("```", 1)[0]) for block in tests.split("```bash\n")[1:]]


def readme_suite() -> list[str]:
    """The README's "whole test suite" block, which CI must run as it is."""
    return readme_blocks()[0]


def before_resolving() -> list[str]:
    """The README's block of the suites that do not fit in CI's time, which every issue runs before it is resolved."""
    return readme_blocks()[1]


def target(name: str) -> tuple[list[str], str]:
    """A Makefile target's prerequisites and recipe."""
    match = re.search(rf"^{re.escape(name)}:([^#\n]*).*\n((?:\t.*\n)*)", MAKEFILE, re.MULTILINE)
    assert match, f"no target {name} in the Makefile"
    return match.group(1).split(), match.group(2)


def sub_makes(recipe: str) -> list[str]:
    """The targets a recipe runs through ``$(MAKE) a b …`` (in a lane of ``tools/lanes.sh`` too)."""
    return [name for names in re.findall(r"\$\(MAKE\) ([a-z -]+)", recipe) for name in names.split()]


def runs(name: str) -> list[str]:
    """The targets a target runs, itself, its prerequisites and its sub-makes included, in order."""
    prerequisites, recipe = target(name)
    setup = {"venv", "jars", "jars-s3"}
    inner = [p for p in prerequisites if p not in setup and not p.startswith("system-")] + sub_makes(recipe)
    return [name] + [t for p in inner for t in runs(p)]


def expanded(text: str) -> str:
    """``text`` with the Makefile's simple variables (``NAME := value``) in place of ``$(NAME)``."""
    variables = dict(re.findall(r"^([A-Z_0-9]+) := (.*)$", MAKEFILE, re.MULTILINE))
    return re.sub(r"\$\(([A-Z_0-9]+)\)", lambda m: variables.get(m.group(1), m.group(0)), text)


def selections(name: str) -> list[str]:
    """The ``pytest -m`` expressions a target runs, its prerequisites' and sub-makes' included."""
    found = [m for t in runs(name) for m in re.findall(r'pytest -m (?:"([^"]+)"|(\S+))', target(t)[1])]
    return [expanded(quoted or bare) for quoted, bare in found]


def selected(names: list[str], carried: tuple[str, ...]) -> bool:
    """Whether a test carrying the markers ``carried`` runs in one of the targets ``names``."""
    return any(Expression.compile(e).evaluate(Carrying(carried)) for name in names for e in selections(name))


def marker_sets() -> list[tuple[str, ...]]:
    """Every combination of the markers pyproject.toml declares, but ``compose`` (root and Docker: ``make
    compose-test`` only)."""
    declared = [
        entry.split(":", 1)[0]
        for entry in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    ]
    assert "scenario" in declared and "compose" in declared
    markers = [m for m in declared if m != "compose"]
    return [carried for size in range(len(markers) + 1) for carried in itertools.combinations(markers, size)]


@dataclass(frozen=True)
class Carrying:
    """A marker expression's matcher: a test that carries ``markers``."""

    markers: tuple[str, ...]

    def __call__(self, name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name in self.markers


def test_ci_runs_the_readmes_test_suite() -> None:
    suite = readme_suite()
    assert suite == ["make ci"], suite
    ci = (ROOT / ".ci" / "run").read_text()
    assert make_lines(ci) == suite
    # Every test `make test` runs, and the operations, Airflow and deploy suites' beside it, and no other.
    suites = ["test", "test-operations", "test-airflow", "test-deploy"]
    assert "lint" in runs("ci") and "lint" in runs("test")
    for carried in marker_sets():
        assert selected(["ci"], carried) == selected(suites, carried), f"a test marked {carried or 'with none'}"
    # Each make target installs what it needs (tools/system-packages.sh): CI installs nothing itself.
    assert not re.search(r"apt-get|apt install|pip install|uv pip|mvn ", ci), "CI has an install step of its own"


def test_every_test_runs_in_ci_or_before_an_issue_is_resolved_whatever_its_markers() -> None:
    """Each combination of the declared markers (but ``compose``: root and Docker, ``make
    compose-test`` only) is selected by a target of CI's suite or of the suites run before an issue is
    resolved, so no test falls between them."""
    assert before_resolving() == ["make test-scenarios"], before_resolving()
    suites = [name.split()[1] for name in readme_suite() + before_resolving()]
    for carried in marker_sets():
        assert selected(suites, carried), f"a test marked {carried or 'with no marker'} runs in no target of CI's suite"


def test_cis_second_lane_has_services_and_state_of_its_own() -> None:
    """The lanes of ``make ci`` run at once: the second's ports and folders are none of the first's (the
    tests' defaults)."""
    lane2 = dict(re.findall(r"(\w+)=(\S+)", MAKEFILE.split("\nLANE2 := ", 1)[1].split("\nci:", 1)[0]))
    _, recipe = target("ci")
    assert "$(LANE2) $(MAKE)" in recipe and recipe.count("$(LANE2)") == 1, recipe
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    defaults = dict(re.findall(r'os\.environ\.get\("(TIDEMARK_TEST_\w+)", (?:"([^"]+)"|str\(.*)', conftest))
    ports = {name for name in defaults if name.endswith("_PORT")}
    assert ports and ports <= set(lane2), (ports, lane2)
    for name in ports:
        assert lane2[name] != defaults[name] and lane2[name] not in defaults.values(), name
        # Below Linux's ephemeral range, where a client's outgoing connection may hold a port for a moment.
        assert int(lane2[name]) < 32768 and int(defaults[name]) < 32768, name
    assert set(lane2) >= {"TIDEMARK_TEST_HOME", "AIRFLOW_HOME"}
    assert all("test-lane2" in lane2[name] for name in ("TIDEMARK_TEST_HOME", "AIRFLOW_HOME"))


def test_lanes_run_at_once_prefix_each_line_and_fail_with_the_first_failing_lane(tmp_path: Path) -> None:
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(ROOT / "tools" / "lanes.sh"), "sleep 2; echo one", "sleep 2; echo two; exit 3", "echo three"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LANES_LOGS": str(tmp_path), "LANES_HISTORY": str(tmp_path / "state" / "lanes.log")},
    )
    assert time.monotonic() - started < 3.9, "the lanes ran one after the other"  # 4 s or more one by one
    lines = result.stdout.splitlines()
    assert {"[lane 1] one", "[lane 2] two", "[lane 3] three"} <= set(lines), lines
    assert f"lane 2 FAILED (status 3): sleep 2; echo two; exit 3 (its whole output: {tmp_path}/lane-2.log)" in lines
    assert "lane 1 passed: sleep 2; echo one" in lines and "lane 3 passed: echo three" in lines
    assert result.returncode == 3
    assert (tmp_path / "lane-2.log").read_text() == "two\n"
    # A line per lane in the history: when, which commit, how long (whole seconds), how it ended.
    history = (tmp_path / "state" / "lanes.log").read_text().splitlines()
    matches = [re.fullmatch(r"\S+Z \S+ lane (\d) (\d+) s status (\d+): (.*)", line) for line in history]
    said = sorted(match.groups() for match in matches if match)
    assert [(lane, code, command) for lane, _, code, command in said] == [
        ("1", "0", "sleep 2; echo one"),
        ("2", "3", "sleep 2; echo two; exit 3"),
        ("3", "0", "echo three"),
    ], history
    assert int(said[0][1]) >= 2 and int(said[1][1]) >= 2, history


def test_a_session_appends_each_tests_seconds_to_the_file_ci_names(tmp_path: Path) -> None:
    times = tmp_path / "state" / "test-times.tsv"
    times.parent.mkdir()
    times.write_text("1.0\t-\tan earlier session's test\n")
    test = "tests/unit/test_ci.py::test_lanes_run_at_once_prefix_each_line_and_fail_with_the_first_failing_lane"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not integration", test],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "TIDEMARK_TEST_TIMES": str(times)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    earlier, line = times.read_text().splitlines()
    assert earlier == "1.0\t-\tan earlier session's test"
    seconds, suite, name = line.split("\t")
    assert (suite, name) == ("not integration", test) and float(seconds) >= 2.0, line  # its lanes sleep 2 s
