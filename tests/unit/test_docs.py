"""The documentation a user follows: every link between the README and docs/ opens a file that exists, at a
heading that exists (as GitHub makes its anchors), and the README's example pipeline is the file
docs/examples/web-pipeline.yaml, which `tidemark pipelines check` accepts beside the shipped pipelines."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from spark_jobs import pipelines_file
from spark_jobs.settings import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
EXAMPLE = PROJECT_ROOT / "docs" / "examples" / "web-pipeline.yaml"


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives ``page``'s headings: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``, a repeated heading numbered."""
    seen: dict[str, int] = {}
    found = set()
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())  # a '#' line inside a code block is no heading
    for heading in re.findall(r"(?m)^#{1,6} (.+?)\s*$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"(?ms)^\s*```.*?^\s*```", "", page.read_text())
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+://|mailto:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_link_opens_a_file_and_a_heading_that_exist(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(PROJECT_ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {file.relative_to(PROJECT_ROOT)}")
    assert not broken, f"{page.relative_to(PROJECT_ROOT)}: " + "; ".join(broken)


def test_the_readmes_example_pipeline_is_the_checked_example_file(tmp_path: Path) -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    [block] = re.findall(r"(?ms)^   ```yaml\n(.*?)^   ```", readme)
    assert textwrap.dedent(block) == textwrap.dedent(EXAMPLE.read_text()), "README's example differs from the file"
    # The shipped file with the example appended, as a user adds it: no problem, and web as the README says.
    shipped = (PROJECT_ROOT / "pipelines.yaml").read_text()
    path = tmp_path / "pipelines.yaml"
    path.write_text(shipped.rstrip("\n") + "\n" + EXAMPLE.read_text())
    declared = pipelines_file.load_each(path)
    assert declared.lines() == []
    web = next(p for p in declared.pipelines if p.name == "web")
    assert web.topic == "web" and web.schedule == "*/5 * * * *"


def test_the_readme_stays_a_users_path_of_at_most_250_lines() -> None:
    """What a user reads first: the reference belongs in docs/ (docs/contributing.md says where)."""
    lines = len((PROJECT_ROOT / "README.md").read_text().splitlines())
    assert lines <= 250, f"README.md has {lines} lines: move reference detail to docs/ and link it"


def test_the_avro_pages_example_pipeline_is_checked_and_fits_its_example_schema(tmp_path: Path) -> None:
    import json

    from spark_jobs.avro import reader_problems

    example = PROJECT_ROOT / "docs" / "examples" / "orders-avro-pipeline.yaml"
    page = (PROJECT_ROOT / "docs" / "avro.md").read_text()
    [block] = re.findall(r"(?ms)^```yaml\n(.*?)^```", page)
    assert block == example.read_text(), "docs/avro.md's example differs from the file"
    path = tmp_path / "pipelines.yaml"
    path.write_text((PROJECT_ROOT / "pipelines.yaml").read_text().rstrip("\n") + "\n" + example.read_text())
    declared = pipelines_file.load_each(path)
    assert declared.lines() == []
    orders = next(p for p in declared.pipelines if p.name == "orders")
    assert (orders.contract.format, orders.contract.subject) == ("avro", "shop.orders-value")
    schema = json.loads((PROJECT_ROOT / "docs" / "examples" / "orders.avsc").read_text())
    assert list(reader_problems(orders.contract, schema)) == []
