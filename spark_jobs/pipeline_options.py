"""A pipeline's options: the keys of its entry in the pipelines file besides its name, topic and contract.

Each option is declared once, as a field of :class:`~spark_jobs.pipelines.Pipeline` made by :func:`option`:
its kind (:class:`Kind`: the JSON Schema of its value in the file, what that schema cannot say, how the
value becomes the field's), its default, the setting whose value a pipeline that leaves it out takes
(and that a run of the pipeline carries), and one line of doc. That declaration drives the file's shape
(``spark_jobs.pipelines_schema``), the checking and reading of an entry (``spark_jobs.pipelines_check``),
``Settings.for_pipeline`` and the options table of docs/configuration.md (``settings.options_table``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from datetime import timedelta
from typing import Any, NamedTuple

from spark_jobs.contract import SessionRules
from spark_jobs.errors import ConfigError

SCHEDULE_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly")
DEFAULT_SCHEDULE = "*/15 * * * *"

_EMAIL = "^[^@\\s]+@[^@\\s]+$"


@dataclass(frozen=True)
class Alerts:
    """Where a pipeline's alerts go besides the task log: an Airflow connection's webhook, e-mail addresses."""

    webhook: str | None = None
    email: tuple[str, ...] = ()


def _as_is(value: Any, default: Any) -> Any:
    return value


def _no_more(value: Any) -> Iterator[str]:
    return iter(())


class Kind(NamedTuple):
    """What an option's value is. ``schema``: its JSON Schema in the file (``x-must``: the one line shown when a
    value breaks it); ``check(value)``: what the schema cannot say, a line per problem (the value has its
    schema's shape); ``read(value, default)``: the :class:`~spark_jobs.pipelines.Pipeline` field's value of an
    entry that sets the option, ``default`` being what an entry that leaves it out gets."""

    schema: Mapping[str, Any]
    check: Callable[[Any], Iterator[str]] = _no_more
    read: Callable[[Any, Any], Any] = _as_is


def option(kind: Kind, default: Any, doc: str, setting: str = "", carried: bool = True, shown: str = "") -> Any:
    """A :class:`~spark_jobs.pipelines.Pipeline` field that an entry's key of the field's name sets, as ``kind``.

    ``default``: its value, or a class or function making one, when neither the entry nor a setting gives one.
    ``setting``: the :class:`~spark_jobs.settings.Settings` field whose value an entry that leaves the option out
    gets; ``carried``: the settings of a run of the pipeline take its value there (``Settings.for_pipeline``).
    ``doc``: its line in the options table, its default shown as the setting's (or as ``shown``).
    """
    meta = {"kind": kind, "doc": doc, "setting": setting, "carried": carried and bool(setting), "shown": shown}
    return field(default_factory=default, metadata=meta) if callable(default) else field(default=default, metadata=meta)


def options(cls: type) -> tuple[Field, ...]:
    """The fields of ``cls`` (a dataclass) declared by :func:`option`, in their order."""
    return tuple(f for f in fields(cls) if "kind" in f.metadata)


def option_problems(cls: type, entry: Mapping[str, Any]) -> Iterator[str]:
    """What the schema of ``cls``'s options cannot say about their values in ``entry``: ``key: problem`` lines."""
    for f in options(cls):
        if f.name in entry:
            yield from (f"{f.name}: {line}" for line in f.metadata["kind"].check(entry[f.name]))


def read_options(cls: type, entry: Mapping[str, Any], defaults: object) -> dict[str, Any]:
    """The values of ``cls``'s options that ``entry`` declares: each read from the entry, else ``defaults``'."""
    values = {f.name: getattr(defaults, f.name) for f in options(cls)}
    for f in options(cls):
        if f.name in entry:
            values[f.name] = f.metadata["kind"].read(entry[f.name], values[f.name])
    return values


def rules(sessions: Mapping[str, Any], default: SessionRules) -> SessionRules:
    """The session rules an entry's ``sessions`` mapping declares, what it leaves out from ``default``."""
    gap = sessions.get("gap_minutes")
    longest = sessions.get("max_hours")
    return SessionRules(
        timedelta(minutes=gap) if gap is not None else default.gap,
        timedelta(hours=longest) if longest is not None else default.max_length,
    )


def _sessions_problems(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        try:
            rules(value, SessionRules())
        except ConfigError as exc:
            yield str(exc)


def _read_sessions(value: Any, default: SessionRules | None) -> SessionRules | None:
    # An entry's own rules fill what they leave out from the documented defaults when the settings' are off.
    return None if value in ("off", False) else rules(value, default or SessionRules())


def _schedule_problems(value: Any) -> Iterator[str]:
    if isinstance(value, str) and value not in SCHEDULE_PRESETS:
        from croniter import croniter

        if not croniter.is_valid(value):
            presets = ", ".join(SCHEDULE_PRESETS)
            yield f"{value!r} is not a cron expression (e.g. '*/15 * * * *') or a preset ({presets})"


def _read_alerts(value: Any, default: Alerts) -> Alerts:
    return Alerts(value.get("webhook"), tuple(value.get("email", ()))) if value else default


SESSIONS = Kind(
    {
        "x-must": "must be off, or a mapping of gap_minutes and max_hours",
        "oneOf": [
            {"const": "off"},
            {"const": False},
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "gap_minutes": {"type": "number", "exclusiveMinimum": 0},
                    "max_hours": {"type": "number", "exclusiveMinimum": 0},
                },
            },
        ],
    },
    _sessions_problems,
    _read_sessions,
)
DAYS = Kind(
    {
        "oneOf": [{"type": "number", "minimum": 0}, {"const": "unbounded"}],
        "x-must": "must be a number of days, 0 or more, or unbounded",
    },
    read=lambda value, default: 0.0 if value == "unbounded" else float(value),
)
RECORDS = Kind(
    {
        "oneOf": [{"type": "integer", "minimum": 0}, {"const": "auto"}],
        "x-must": "must be auto, or a whole number of records, 0 or more (0: no cap)",
    }
)
SCHEDULE = Kind(
    {
        "type": ["string", "null"],
        "x-must": "must be a cron expression, a preset such as @hourly, or null (manual runs only)",
    },
    _schedule_problems,
)
ALERTS = Kind(
    {
        "type": "object",
        "additionalProperties": False,
        "x-must": "must be a mapping of webhook (an Airflow connection id) and email (a list)",
        "properties": {
            "webhook": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$", "x-must": "must be an Airflow connection id"},
            "email": {
                "type": "array",
                "items": {"type": "string", "pattern": _EMAIL, "x-must": "must be an e-mail address"},
                "x-must": "must be a list of e-mail addresses",
            },
        },
    },
    read=_read_alerts,
)
