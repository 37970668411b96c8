"""Secrets kept out of what tidemark prints, logs and sends (errors, alerts, reports).

:func:`redact` replaces the values of known secrets (the PostgreSQL password, Kafka's SASL and
SSL passwords, a JAAS configuration) and anything shaped like a secret (``password=…`` in a DSN,
``user:password@`` in a URL, ``password="…"`` in a JAAS configuration) with ``***``. Messages are
written without secrets in the first place; this is the net under them, on every path that hands
text to a person: the ``tidemark`` command's errors and tracebacks, and the Airflow alert.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "***"
SECRET_OPTION = re.compile(r"password|secret|jaas|token|credential", re.IGNORECASE)
_PATTERNS = (
    # libpq key=value DSN (quoted or not) and JAAS / properties style password="…"
    re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s'\";,]+)"),
    # URL userinfo: scheme://user:secret@host
    re.compile(r"(://[^:/@\s]+:)([^@\s]+)(?=@)"),
    # JSON / dict style: "sasl.password": "…"
    re.compile(r"(?i)([\"']?[\w.]*(?:password|secret)[\"']?\s*:\s*)(\"[^\"]*\"|'[^']*')"),
)


def dsn_password(dsn: str) -> str | None:
    """The password in a libpq DSN (key=value or URI), if any."""
    try:
        from psycopg2.extensions import parse_dsn

        return parse_dsn(dsn).get("password") or None
    except Exception:  # an unparsable DSN: the patterns still apply
        return None


def option_secrets(options: Mapping[str, object]) -> list[str]:
    """Values of client options that are secrets (``sasl.password``, ``sasl.jaas.config``, …)."""
    found = []
    for key, value in options.items():
        if SECRET_OPTION.search(str(key)) and str(value):
            found.append(str(value))
            found += re.findall(r"password\s*=\s*\"([^\"]+)\"", str(value))
    return found


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret value and every secret-shaped value replaced by ``***``."""
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text
