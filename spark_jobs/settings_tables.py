"""docs/configuration.md's tables of the settings and of a pipeline's options, made from their declarations
(``spark_jobs.settings.setting`` and ``spark_jobs.pipeline_options.option``); tests/unit/test_settings_table.py
holds the document to them."""

from __future__ import annotations

from dataclasses import MISSING, Field, fields
from typing import Any

from spark_jobs.pipeline_options import options
from spark_jobs.pipelines import Pipeline
from spark_jobs.settings import Settings


def _default(f: Field[Any]) -> Any:
    """A setting's default: its ``default``, or what its ``default_factory`` makes."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is MISSING:
        raise TypeError(f"the setting {f.name} has no default")
    return f.default_factory()


def settings_table() -> str:
    """README.md's settings table in Markdown (header included), a row per setting in field order."""
    rows = ["| variable | default |", "| --- | --- |"]
    for f in fields(Settings):
        names, parser, doc, shown = (f.metadata[key] for key in ("env", "parser", "doc", "shown"))
        if not shown:
            default = _default(f)
            shown = ", ".join(f"`{v}`" if parser.code else v for v in parser.write(default, names).values())
        text = (" " if doc.startswith("(") else ": ").join(part for part in (shown, doc) if part)
        rows.append(f"| {', '.join(f'`{name}`' for name in names)} | {text} |")
    return "\n".join(rows) + "\n"


def options_table() -> str:
    """docs/configuration.md's table of a pipeline's options (header included), a row per option of
    :class:`~spark_jobs.pipelines.Pipeline` in field order: its default is the setting it takes."""
    settings = {f.name: f for f in fields(Settings)}
    rows = ["| option | default | what it is |", "| --- | --- | --- |"]
    for f in options(Pipeline):
        shown = f.metadata["shown"]
        if not shown:
            taken = settings[f.metadata["setting"]]
            names, parser = taken.metadata["env"], taken.metadata["parser"]
            values = parser.write(_default(taken), names)
            shown = ", ".join(f"`{name}`" for name in names) + " (" + ", ".join(
                f"`{v}`" if parser.code else v for v in values.values()) + ")"  # fmt: skip
        rows.append(f"| `{f.name}` | {shown} | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"
