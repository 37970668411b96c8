"""The pipelines file checked entry by entry, so that one entry's mistake is its pipeline's alone.

:func:`check` takes the file's document. First its shape (``spark_jobs.pipelines_schema``); then what a
schema cannot say: each name used once and not one PostgreSQL or the lake root keeps, a topic feeding
one pipeline (a pipeline's proof of coverage is that each offset of its topic is in exactly one of its
record tables, which two pipelines on one topic would each claim), each contract against its own schema
(``spark_jobs.contract_schema``) and each option's value (its kind's check). Every problem is one line
naming the file, the pipeline and the field (:class:`Problem`), and all of them are reported at once; a
pipeline with a problem is left out of :attr:`Declared.pipelines`, and the others stay usable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_jobs.contract_schema import avro_problem, contract_of, contract_problems, read_schema, read_text
from spark_jobs.errors import ConfigError
from spark_jobs.pipeline_names import PipelineNames
from spark_jobs.pipeline_options import option_problems, read_options
from spark_jobs.pipelines import Pipeline
from spark_jobs.pipelines_schema import NAME_PATTERN, shape_problems

# Names a pipeline may not have: PostgreSQL's schemas (and those starting pg_), `public` (the default
# pipeline `events` keeps its tables there), and the lake root's own folders, where the default
# pipeline keeps its Delta tables (`tidemark land` its raw_events).
RESERVED_NAMES = {
    **dict.fromkeys(("public", "information_schema"), "is a schema PostgreSQL keeps for itself"),
    **dict.fromkeys(("duplicates", "quarantine", "sessions", "raw_events"), "is a Delta table of the lake root"),
}


class PipelinesError(ConfigError):
    """The file's problems, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Problem:
    """One line of what is wrong with a pipelines file, and the pipeline it is about (None: no one pipeline)."""

    pipeline: str | None
    line: str


@dataclass(frozen=True)
class Declared:
    """What a pipelines file declares: the pipelines with no problem, and every problem the file has.

    A pipeline with a problem is left out of :attr:`pipelines`, and so is every entry of a name used
    twice: the others stay usable (the DAGs of a healthy pipeline load beside a broken entry).
    """

    pipelines: list[Pipeline]
    problems: list[Problem]
    # The pipelines that read each topic (by :func:`kafka_topic_key`), problems or not: one each, in a good file.
    readers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The topic of each entry whose name and topic could be read, problems or not.
    topics: Mapping[str, str] = field(default_factory=dict)

    def readers_of(self, topic: str) -> tuple[str, ...]:
        """The pipelines whose entries read ``topic``, or a topic Kafka cannot tell from it."""
        return self.readers.get(kafka_topic_key(topic), ())

    def lines(self) -> list[str]:
        return [problem.line for problem in self.problems]

    def problems_of(self, name: str) -> list[str]:
        return [problem.line for problem in self.problems if problem.pipeline == name]

    def broken(self) -> list[str]:
        """The pipelines declared with a problem, in the file's order: each name a pipeline could have (the
        others name no schema, folder or DAG) and no pipeline without a problem has. They stay visible with
        their problems (DAGs, the page, the metrics), and every run of theirs is refused with them."""
        good = {pipeline.name for pipeline in self.pipelines}
        names = (problem.pipeline for problem in self.problems)
        return list(dict.fromkeys(n for n in names if n and n not in good and may_name_a_pipeline(n)))


def parse(document: Any, path: Path, defaults: Any) -> list[Pipeline]:
    """The pipelines of the parsed file ``document`` (read from ``path``; contract files are beside it), or a
    :class:`PipelinesError` with every problem it has. ``defaults``: a :class:`~spark_jobs.pipelines.Defaults`."""
    declared = check(document, path, defaults)
    if declared.problems:
        raise PipelinesError(declared.lines())
    return declared.pipelines


def check(document: Any, path: Path, defaults: Any, read: Callable[[Path], str] = read_text) -> Declared:
    """Check the parsed file ``document`` (read from ``path``) entry by entry: see :class:`Declared`. What an
    entry leaves out comes from ``defaults`` (a :class:`~spark_jobs.pipelines.Defaults`); ``read`` reads the
    contracts' schema files beside the file."""
    problems: list[Problem] = []
    broken: set[int] = set()  # entries whose shape is wrong: their contracts are not checked further
    for place, line in shape_problems(document, path.name):
        index = place[1] if len(place) > 1 and place[0] == "pipelines" else -1
        problems.append(Problem(_entry_name(document, index), line))
        broken.add(index)
    if -1 in broken:  # the file itself is not a list of pipelines
        raise PipelinesError([problem.line for problem in problems])
    entries = _Entries(path, defaults, read)
    for index, entry in enumerate(document["pipelines"]):
        if index not in broken:
            problems += entries.check(entry)
    failed = {problem.pipeline for problem in problems}
    pipelines = [_pipeline(*found, defaults) for found in entries.found if found[0]["name"] not in failed]
    return Declared(pipelines, problems, entries.readers, entries.topic_of)


def _pipeline(entry: Mapping[str, Any], topic: str, schema: Mapping[str, Any], defaults: Any) -> Pipeline:
    """The pipeline of a checked ``entry``, its topic and contract's schema being ``topic`` and ``schema``."""
    contract = contract_of(entry["contract"], schema, topic)
    return Pipeline(entry["name"], topic, contract, **read_options(Pipeline, entry, defaults))


@dataclass
class _Entries:
    """The entries of one file as :func:`check` goes through them: the names and topics they took so far."""

    path: Path
    defaults: Any
    read: Callable[[Path], str]
    found: list[tuple[Mapping[str, Any], str, Mapping[str, Any]]] = field(default_factory=list)  # entry, topic, schema
    names: set[str] = field(default_factory=set)
    topics: dict[str, tuple[str, str]] = field(default_factory=dict)  # Kafka's key: the first pipeline, its topic
    readers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    topic_of: dict[str, str] = field(default_factory=dict)

    def check(self, entry: Mapping[str, Any]) -> list[Problem]:
        """The problems of ``entry`` (whose shape is right); without any, it is :attr:`found`."""
        name = entry["name"]
        where = f"{self.path.name}: pipeline {name!r}"
        if name in self.names:
            return [Problem(name, f"{where}: name: another pipeline has this name; each name is used once")]
        self.names.add(name)
        taken = _reserved(name)
        if taken:
            return [Problem(name, f"{where}: name: {name!r} {taken}, and a pipeline's name names its PostgreSQL "
                                  "schema and its folder of the lake; choose another")]  # fmt: skip
        topic = PipelineNames(name).topic(entry.get("topic"), self.defaults.events_topic)
        lines = self._claim(name, topic)
        contract = entry["contract"]
        schema: Mapping[str, Any]
        problem: str | None
        if contract.get("format") == "avro":
            # The reader schema is the registry's: a run checks the roles and columns against it (spark_jobs.avro).
            schema, problem = {}, avro_problem(contract)
        elif "subject" in contract:
            schema, problem = {}, "contract.subject: a subject names an Avro schema; add format: avro, or remove it"
        elif "schema" not in contract:
            schema, problem = {}, "contract.schema is missing: a JSON Schema of the value (or format: avro)"
        else:  # the JSON contract's schema is read once (a file beside this one, or inline) and checked first
            schema, problem = read_schema(contract["schema"], self.path.parent, self.read)
            problem = problem and f"contract.schema: {problem}"
        if problem:
            lines.append(problem)
        else:
            lines += [*contract_problems(contract, schema), *option_problems(Pipeline, entry)]
        if not lines:
            self.found.append((entry, topic, schema))
        return [Problem(name, f"{where}: {line}") for line in lines]

    def _claim(self, name: str, topic: str) -> list[str]:
        """Record that ``name`` reads ``topic``; a problem when another pipeline read it first."""
        key = kafka_topic_key(topic)
        claimed = self.topics.get(key)
        self.topics.setdefault(key, (name, topic))
        self.readers[key] = (*self.readers.get(key, ()), name)
        self.topic_of.setdefault(name, topic)
        if claimed is None:
            return []
        same = "" if claimed[1] == topic else f" (as {claimed[1]!r}: Kafka treats '.' and '_' in a name as one)"
        return [
            f"topic: {topic!r} is pipeline {claimed[0]!r}'s topic already{same}; a topic feeds one pipeline (its "
            "offsets are that pipeline's proof of coverage)"
        ]


def _reserved(name: str) -> str | None:
    """Why ``name`` may not be a pipeline's (:data:`RESERVED_NAMES`), or None."""
    return RESERVED_NAMES["public"] if name.startswith("pg_") else RESERVED_NAMES.get(name)


def may_name_a_pipeline(name: str) -> bool:
    """Whether ``name`` is one a pipeline may have: :data:`NAME_PATTERN`, whole, and not reserved."""
    return re.fullmatch(NAME_PATTERN, name) is not None and _reserved(name) is None


def kafka_topic_key(topic: str) -> str:
    """What Kafka compares topic names by: it refuses a topic whose name differs from another's only in '.'
    against '_' (their metric names would be one)."""
    return topic.replace(".", "_")


def _entry_name(document: Any, index: int) -> str | None:
    """The name of the file's entry ``index``, when it has one."""
    try:
        name = document["pipelines"][index]["name"]
    except (TypeError, KeyError, IndexError):
        return None
    return name if index >= 0 and isinstance(name, str) else None
