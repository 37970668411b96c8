"""CI runs the README's test suite, and that suite runs every test whatever its markers: a marker that
moves tests out of one target (``scenario``, out of ``make test``) must move them into another."""

from __future__ import annotations

import itertools
import re
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


def selections(name: str) -> list[str]:
    """The ``pytest -m`` expressions a target runs, its prerequisites' included."""
    prerequisites, recipe = target(name)
    found = re.findall(r'pytest -m (?:"([^"]+)"|(\S+))', recipe)
    own = [quoted or bare for quoted, bare in found]
    setup = {"venv", "jars", "jars-s3"}
    return own + [e for p in prerequisites if p not in setup and not p.startswith("system-") for e in selections(p)]


@dataclass(frozen=True)
class Carrying:
    """A marker expression's matcher: a test that carries ``markers``."""

    markers: tuple[str, ...]

    def __call__(self, name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name in self.markers


def test_ci_runs_the_readmes_test_suite() -> None:
    suite = readme_suite()
    assert suite[0] == "make test" and len(suite) >= 3, suite
    ci = (ROOT / ".ci" / "run").read_text()
    assert make_lines(ci) == suite
    # Each make target installs what it needs (tools/system-packages.sh): CI installs nothing itself.
    assert not re.search(r"apt-get|apt install|pip install|uv pip|mvn ", ci), "CI has an install step of its own"


def test_every_test_runs_in_ci_or_before_an_issue_is_resolved_whatever_its_markers() -> None:
    """Each combination of the declared markers (but ``compose``: root and Docker, ``make
    compose-test`` only) is selected by a target of CI's suite or of the suites run before an issue is
    resolved, so no test falls between them."""
    declared = [
        entry.split(":", 1)[0]
        for entry in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    ]
    assert "scenario" in declared and "compose" in declared
    assert before_resolving() == ["make test-operations", "make test-scenarios"], before_resolving()
    suites = readme_suite() + before_resolving()
    expressions = [Expression.compile(e) for name in suites for e in selections(name.split()[1])]
    markers = [m for m in declared if m != "compose"]
    for size in range(len(markers) + 1):
        for carried in itertools.combinations(markers, size):
            assert any(e.evaluate(Carrying(carried)) for e in expressions), (
                f"a test marked {carried or 'with no marker'} runs in no target of CI's suite"
            )
