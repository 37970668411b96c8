"""A Confluent-compatible schema registry, as an Avro pipeline's driver asks it: the subject's versions
(the reader schema a batch records) and the writer schemas by id (the ids its records carry).

Its URL comes from the settings or the pipeline's entry; credentials only as the URL's user and password
(the environment's or an Airflow connection's, never the pipelines file's), sent as HTTP basic
authentication and never printed (:func:`spark_jobs.secrets.redact` masks a URL's password).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from spark_jobs.errors import ConfigError

ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
TIMEOUT_SECONDS = 10


class RegistryUnavailable(ConfigError):
    """The registry does not answer, or refuses tidemark's credentials."""


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject: its number, the schema's id and text."""

    subject: str
    version: int
    schema_id: int
    schema: str


@dataclass(frozen=True)
class SchemaRegistry:
    """The registry at ``url`` (Confluent's API: ``…/subjects``, ``…/schemas/ids/<id>``)."""

    url: str

    @property
    def shown(self) -> str:
        """The URL without its credentials, as messages name it."""
        parts = urllib.parse.urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")

    def latest(self, subject: str) -> SubjectVersion:
        """The subject's newest version; a :class:`ConfigError` naming the subject when it has none."""
        return self.version(subject, "latest")

    def version(self, subject: str, version: int | str) -> SubjectVersion:
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
        found = self._get(path)
        if found is None:
            which = "" if version == "latest" else f"version {version} of "
            raise ConfigError(
                f"the schema registry at {self.shown} has no {which}subject {subject!r}: register the producers' "
                "schema under it (`tidemark produce --pipeline NAME` registers the pipeline's), or name the subject "
                "the producers use in the contract's `subject`"
            )
        return SubjectVersion(subject, int(found["version"]), int(found["id"]), str(found["schema"]))

    def schema(self, schema_id: int) -> str | None:
        """The schema whose id is ``schema_id``, None when the registry does not know it."""
        found = self._get(f"/schemas/ids/{schema_id}")
        return None if found is None else str(found["schema"])

    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` under ``subject`` (a new version unless it is there); its id."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        answer = self._send("POST", path, {"schema": schema})
        return int(answer["id"])

    def _get(self, path: str) -> Any:
        try:
            return self._send("GET", path)
        except _NotFound:
            return None

    def _send(self, method: str, path: str, body: dict | None = None) -> Any:
        parts = urllib.parse.urlsplit(self.url)
        request = urllib.request.Request(self.shown + path, method=method, headers={"Accept": ACCEPT})
        if parts.username is not None:
            token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            request.add_header("Authorization", "Basic " + base64.b64encode(token.encode()).decode())
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise _NotFound from None
            detail = _error_message(exc)
            if exc.code in (401, 403):
                raise RegistryUnavailable(
                    f"the schema registry at {self.shown} refused tidemark's credentials (HTTP {exc.code}): "
                    "put the user and password in the registry URL (TIDEMARK_SCHEMA_REGISTRY_URL or the "
                    "connection tidemark_schema_registry)"
                ) from None
            raise ConfigError(f"the schema registry at {self.shown} answered HTTP {exc.code}: {detail}") from None
        except (OSError, ValueError) as exc:  # refused, timed out, not JSON
            reason = getattr(exc, "reason", exc)
            raise RegistryUnavailable(
                f"the schema registry at {self.shown} does not answer ({reason}): start it (`tidemark up` starts "
                "the local one) or set TIDEMARK_SCHEMA_REGISTRY_URL"
            ) from None


class _NotFound(Exception):
    pass


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.load(exc).get("message", exc.reason))
    except (OSError, ValueError, AttributeError):
        return str(exc.reason)
