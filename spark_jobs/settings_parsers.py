"""How a setting's environment variables become its value and back: the parsers of ``spark_jobs.settings``.

A :class:`Parser` reads a setting's variables (unset or empty: its default applies; a value it cannot
read: a one-line :class:`~spark_jobs.errors.ConfigError` naming the variable) and writes them back, so
that ``Settings.from_env(settings.to_env()) == settings``. Each ``setting(...)`` declaration names one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

from spark_jobs.contract import SessionRules
from spark_jobs.errors import ConfigError


class Parser(NamedTuple):
    """How a setting's variables become its value and back. ``read(env, names)``: the value, None when they are
    unset or empty (the field's default applies), or a one-line ConfigError naming the variable; ``write(value,
    names)``: the variables ``read`` turns back into ``value``. ``code``: the README shows the default as code.
    ``unset``: what ``read`` returns for unset variables, when None is a value of the setting."""

    read: Callable[[Mapping[str, str], tuple[str, ...]], Any]
    write: Callable[[Any, tuple[str, ...]], dict[str, str]]
    code: bool = False
    unset: object = None


def _one(parse: Callable[[str, str], Any], format: Callable[[Any], str] = str, code: bool = False) -> Parser:
    """A parser of one variable; ``parse(name, text)`` gets its text when it is set and not empty."""
    return Parser(
        lambda env, names: parse(names[0], env[names[0]]) if env.get(names[0]) else None,
        lambda value, names: {names[0]: format(value)},
        code,
    )


def _g(value: float) -> str:
    # Short ("7", not "7.0") where that reads back the same, else exact (not 1234567.5 as 1.23457e+06).
    text = f"{value:g}"
    return text if float(text) == value else repr(value)


def _port(name: str, raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a port number; set it to an integer 1-65535") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{name}={port} is out of range; set it to an integer 1-65535")
    return port


def _positive(name: str, raw: str, kind: type = float) -> Any:
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number; set it to a positive {kind.__name__}") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def _count(name: str, raw: str) -> int:
    # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts.
    if not raw.strip().isdecimal():
        raise ConfigError(f"{name}={raw!r} must be a whole number, 0 or more")
    return int(raw)


def _cap(name: str, raw: str) -> int | str:
    """``auto``, or a whole number of records (0: no cap)."""
    if raw.strip().lower() == "auto":
        return "auto"
    if not raw.strip().isdecimal():
        raise ConfigError(f"{name}={raw!r} must be auto, or a whole number of records, 0 or more (0: no cap)")
    return int(raw)


def _horizon(name: str, raw: str) -> float | None:
    """Positive days, or ``unbounded`` (also 0); blank: the default."""
    raw = raw.strip()
    if raw.lower() in ("", "unbounded"):
        return 0.0 if raw else None
    try:
        days = float(raw)
    except ValueError:
        days = -1.0
    if not 0 <= days < float("inf"):
        raise ConfigError(
            f"{name}={raw!r}: set a number of days (e.g. 30), or unbounded to compare with every stored copy"
        )
    return days


_UNSET_RULES = object()  # _read_rules fills in the defaults itself: its None means off


def _read_rules(env: Mapping[str, str], names: tuple[str, ...]) -> SessionRules | None:
    if env.get(names[0], "").strip().lower() == "off":
        return None
    gap, longest = (NUMBER.read(env, (name,)) for name in names)
    default = SessionRules()
    try:
        return SessionRules(
            timedelta(minutes=gap) if gap else default.gap, timedelta(hours=longest) if longest else default.max_length
        )
    except ValueError as exc:
        raise ConfigError(f"{' / '.join(names)}: {exc}") from None


def _write_rules(rules: SessionRules | None, names: tuple[str, ...]) -> dict[str, str]:
    if rules is None:
        return {names[0]: "off"}
    return {names[0]: _g(rules.gap.total_seconds() / 60), names[1]: _g(rules.max_length.total_seconds() / 3600)}


def _read_options(env: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    prefix = names[0].removesuffix("<NAME>")
    return {key[len(prefix) :].lower().replace("_", "."): value for key, value in env.items() if key.startswith(prefix)}


def _write_options(options: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {names[0].replace("<NAME>", key.upper().replace(".", "_")): str(value) for key, value in options.items()}


PORT, COUNT, NUMBER, HORIZON = _one(_port), _one(_count), _one(_positive, _g), _one(_horizon, _g)
WHOLE = _one(lambda name, raw: _positive(name, raw, int))
CAP = _one(_cap, code=True)
TEXT = _one(lambda _, raw: raw, code=True)
PATH = _one(lambda _, raw: Path(raw), code=True)
FLAG = _one(lambda _, raw: raw.lower() == "true", lambda value: str(value).lower(), code=True)
RULES = Parser(_read_rules, _write_rules, unset=_UNSET_RULES)  # None: sessions off
OPTIONS = Parser(_read_options, _write_options)
