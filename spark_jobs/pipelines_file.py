"""The pipelines file's text as a document, entry by entry: a mistake in one entry's YAML is that entry's.

YAML reads a file whole: one unbalanced quote or tab in one pipeline's entry and the parser has no
document, so every pipeline of the file would be gone at once (its DAGs, its row on the page, its
metrics). Here an entry whose lines do not parse is set aside as a problem of that pipeline (named
from its ``name:`` line when it has one, with the line and column YAML gave), and the rest of the file
is read again without it: what the other entries say is what runs. Only a mistake outside every
entry (the ``pipelines:`` line itself) leaves no document.

:func:`load_each` reads and checks the file (``spark_jobs.pipelines_check``) once per content: a process
asks for it many times (each DAG file, each page, each contract a run reads), and the answer is kept
with the bytes of the file and of the contracts' schema files it read. The next call reads those
files again and parses only when one of them changed, so an edit is seen by the next read.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spark_jobs.contract_schema import read_text
from spark_jobs.pipelines import Defaults, Pipeline
from spark_jobs.pipelines_check import Declared, PipelinesError, Problem, check

# What load_each read and answered, by the file's path and the defaults; a few kept.
_READ: dict[tuple[Path, Any], tuple[dict[Path, bytes | None], Declared]] = {}
_READ_LOCK = threading.Lock()
_READ_KEPT = 16
# The top-level key that lists the pipelines, and a list item of it.
_LIST_KEY = re.compile(r"^pipelines\s*:")
_ITEM = re.compile(r"^(\s*)-(\s|$)")
_NAME = re.compile(r"""^\s*(?:-\s+)?name\s*:\s*["']?([^"'\s#]+)""")


@dataclass(frozen=True)
class SetAside:
    """An entry whose lines are not YAML: its name when its ``name:`` line says one, and the line to show."""

    name: str | None
    line: str


class WholeFileError(Exception):
    """The file has no document: one line saying why and where."""


def read_document(path: Path, read: Callable[[Path], str] = read_text) -> tuple[Any, list[SetAside]]:
    """The document of the pipelines file at ``path`` (its text as ``read`` reads it), and the entries set aside
    because their lines are not YAML. Raises :class:`WholeFileError` (one line) when the file cannot be read or
    its mistake is outside every entry; ``OSError`` and ``UnicodeDecodeError`` as reading raises them."""
    import yaml

    lines = read(path).splitlines(keepends=True)
    set_aside: list[SetAside] = []
    first = None  # the file's own first mistake, which a file with no document is refused with
    while True:
        try:
            return yaml.safe_load("".join(lines)), set_aside
        except yaml.YAMLError as exc:
            span = _entry_of(lines, exc)
            where = _where(exc)
            first = first or f"{path.name}: not valid YAML{where}: {_problem(exc)}"
            if span is None:
                raise WholeFileError(first) from None
            start, end = span
            name = next((m.group(1) for m in map(_NAME.match, lines[start:end]) if m), None)
            who = f"pipeline {name!r}" if name else f"the entry at line {start + 1}"
            set_aside.append(SetAside(name, f"{path.name}: {who}: not valid YAML{where}: {_problem(exc)}"))
            lines[start:end] = ["\n"] * (end - start)  # the lines after it keep their numbers


def _entry_of(lines: list[str], exc: Exception) -> tuple[int, int] | None:
    """The lines ``[start, end)`` of the entry of the ``pipelines:`` list where YAML found its mistake: where
    the construct it was reading began (a quoted scalar, a mapping), else where it stopped."""
    spans = _entries(lines)
    for mark in (getattr(exc, "context_mark", None), getattr(exc, "problem_mark", None)):
        if mark is None:
            continue
        for start, end in spans:
            if start <= mark.line < end:
                return start, end
    return None


def _entries(lines: list[str]) -> list[tuple[int, int]]:
    """The line spans of the items of the top-level ``pipelines:`` list (each from its ``-`` line to the next
    item, or to the next top-level line)."""
    key = next((i for i, line in enumerate(lines) if _LIST_KEY.match(line)), None)
    if key is None:
        return []
    starts: list[int] = []
    indent: str | None = None
    end = len(lines)
    for i in range(key + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = _ITEM.match(line)
        width = len(line) - len(line.lstrip())
        if indent is None and item:
            indent = item.group(1)
        if item and item.group(1) == indent:
            starts.append(i)
        elif width <= len(indent or ""):
            end = i  # a line at the list's level or above that is not an item: the list ended
            break
    return list(zip(starts, [*starts[1:], end], strict=True)) if starts else []


def _where(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _problem(exc: Exception) -> str:
    """YAML's problem, and what it was reading when it found it (from which line)."""
    problem = getattr(exc, "problem", None) or str(exc)
    context, mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if not context:
        return problem
    return f"{problem} ({context}{f' begun at line {mark.line + 1}' if mark else ''})"


def load(path: Path, defaults: Any = None) -> list[Pipeline]:
    """The pipelines ``path`` declares, or a :class:`~spark_jobs.pipelines_check.PipelinesError` with every
    problem it has. ``defaults``: what an entry leaves out (a :class:`~spark_jobs.pipelines.Defaults`)."""
    declared = load_each(path, defaults)
    if declared.problems:
        raise PipelinesError(declared.lines())
    return declared.pipelines


def load_each(path: Path, defaults: Any = None) -> Declared:
    """The pipelines of ``path`` that have no problem, and the problems of the others (an entry whose lines are
    not YAML is a problem of its pipeline). A file that cannot be read, has no document, or is not a list of
    pipelines, raises :class:`~spark_jobs.pipelines_check.PipelinesError`. Read and checked once per content of
    the file and its contracts' schema files (see above)."""
    defaults = defaults or Defaults()
    key = (path.absolute(), defaults)
    with _READ_LOCK:
        kept = _READ.get(key)
    if kept is None or any(_bytes(file) != data for file, data in kept[0].items()):
        files = _Files()
        kept = files.read_bytes, _load_each(path, defaults, files.read)
        with _READ_LOCK:
            _READ.pop(key, None)
            _READ[key] = kept
            while len(_READ) > _READ_KEPT:
                del _READ[next(iter(_READ))]
    declared = kept[1]  # a copy of its own for each caller
    return replace(declared, pipelines=[*declared.pipelines], problems=[*declared.problems],
                   readers=dict(declared.readers), topics=dict(declared.topics))  # fmt: skip


def _load_each(path: Path, defaults: Any, read: Callable[[Path], str]) -> Declared:
    document, set_aside = _read(path, read)
    declared = check(document, path, defaults, read)
    if not set_aside:
        return declared
    unreadable = {problem.pipeline for problem in set_aside}  # a good entry of the same name is not the one
    return replace(
        declared,
        pipelines=[p for p in declared.pipelines if p.name not in unreadable],
        problems=[*set_aside, *declared.problems],
    )


def _read(path: Path, read: Callable[[Path], str]) -> tuple[Any, list[Problem]]:
    """The document of the file at ``path``, and a problem for each entry whose lines are not YAML; a file with
    no document raises :class:`~spark_jobs.pipelines_check.PipelinesError`."""
    try:
        document, set_aside = read_document(path, read)
    except FileNotFoundError:
        raise PipelinesError([f"{path}: no such file; set TIDEMARK_PIPELINES to your pipelines file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelinesError([f"{path}: cannot be read ({exc})"]) from None
    except WholeFileError as exc:
        raise PipelinesError([str(exc)]) from None
    return document, [Problem(entry.name, entry.line) for entry in set_aside]


class _Files:
    """Reads files as :func:`~spark_jobs.contract_schema.read_text` does, and keeps the bytes of each read (None:
    it could not be read), which a later :func:`load_each` compares with the files' bytes then."""

    def __init__(self) -> None:
        self.read_bytes: dict[Path, bytes | None] = {}

    def read(self, path: Path) -> str:
        try:
            data = path.read_bytes()
        except OSError:
            self.read_bytes[path] = None
            raise
        self.read_bytes[path] = data
        return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()  # as Path.read_text decodes


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
