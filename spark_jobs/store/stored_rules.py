"""The rules the stored data was built with: the session rules (``session_rules``) and the contract
(``contracts``).

The stored sessions follow one set of session rules, and the stored records one contract (or a
compatible change of it). A batch records both in the transaction of its ledger row; a run whose
rules or contract differ in a way the tables cannot take is refused before any write
(:func:`refuse_other_rules`, :func:`verify_contract`), and a rules change rebuilds every session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from spark_jobs.contract import SessionRules
from spark_jobs.errors import ContractChanged, SessionRulesChanged

if TYPE_CHECKING:
    from spark_jobs.pipelines import Contract


def verify_contract(settings) -> None:  # Settings
    """Before any work: the pipeline's contract must be the one its stored records follow, or a compatible
    change of it (which the run's first batch records); otherwise :class:`ContractChanged`."""
    from spark_jobs import db

    with db.transaction(settings.pipeline_dsn) as cur:
        refuse_incompatible_contract(cur, settings.run_contract(), settings.pipeline)


@dataclass(frozen=True)
class RecordedRules:
    """What the stored sessions follow: ``rules``, or None when the pipeline cuts no sessions."""

    rules: SessionRules | None


def recorded_session_rules(cur) -> RecordedRules | None:
    """What the newest row of ``session_rules`` says (None before the first batch)."""
    cur.execute("SELECT gap_seconds, max_length_seconds FROM session_rules ORDER BY changed_at DESC LIMIT 1")
    row = cur.fetchone()
    if row is None:
        return None
    return RecordedRules(None if row[0] is None else SessionRules(timedelta(seconds=row[0]), timedelta(seconds=row[1])))


def stored_session_rules(cur) -> SessionRules | None:
    """The rules the stored sessions follow (None before the first batch, or when sessions are off)."""
    recorded = recorded_session_rules(cur)
    return None if recorded is None else recorded.rules


def describe_rules(rules: SessionRules) -> str:
    return f"gap {rules.gap.total_seconds() / 60:g} min, maximum {rules.max_length.total_seconds() / 3600:g} h"


def check_session_rules(cur, rules: SessionRules | None) -> None:
    """Fail when the stored sessions were built under other rules (or none were cut, or some were and
    ``rules`` is None: sessions off); record ``rules`` when nothing is recorded yet."""
    recorded = recorded_session_rules(cur)
    if recorded is None:
        record_session_rules(cur, rules, "first batch")
    elif recorded.rules != rules:
        raise rules_changed(recorded.rules, rules)


def refuse_other_rules(cur, rules: SessionRules | None) -> None:
    """Fail (:func:`rules_changed`) when the stored sessions were built under other ``rules``; record nothing.
    A batch asks this before its first write: its commit would refuse the same rules (:func:`check_session_rules`)
    after its Delta writes, and leave the two sinks apart."""
    recorded = recorded_session_rules(cur)
    if recorded is not None and recorded.rules != rules:
        raise rules_changed(recorded.rules, rules)


def rules_changed(stored: SessionRules | None, rules: SessionRules | None) -> SessionRulesChanged:
    """The error for a run whose session ``rules`` differ from the ``stored`` ones, saying what to do
    (None: the pipeline cuts no sessions, ``sessions: off``)."""
    if stored is None:
        assert rules is not None  # asked only when the rules differ
        return SessionRulesChanged(
            f"the pipeline cut no sessions so far (sessions: off), this run cuts them with {describe_rules(rules)}. "
            "Pass --rebuild-sessions to cut the sessions of every stored event first, or declare sessions: off again."
        )
    if rules is None:
        return SessionRulesChanged(
            f"the stored sessions were built with {describe_rules(stored)}; sessions: off would leave them as they "
            "are while the events change. Declare the pipeline's sessions again (gap_minutes, max_hours), or declare "
            "a new pipeline (another name and topic) without sessions."
        )
    return SessionRulesChanged(
        f"the stored sessions were built with {describe_rules(stored)}, this run uses {describe_rules(rules)}. "
        "Run with the stored rules (TIDEMARK_SESSION_GAP_MINUTES, TIDEMARK_SESSION_MAX_HOURS or --gap-minutes, "
        "--max-session-hours), or pass --rebuild-sessions to recompute every stored session under the new rules."
    )


def record_session_rules(cur, rules: SessionRules | None, reason: str) -> None:
    """Record ``rules`` (None: the pipeline cuts no sessions) as what the stored sessions follow from now on."""
    cur.execute(
        "INSERT INTO session_rules (gap_seconds, max_length_seconds, reason) VALUES (%s, %s, %s)",
        (*((None, None) if rules is None else (rules.gap.total_seconds(), rules.max_length.total_seconds())), reason),
    )


def stored_contract(cur) -> tuple[str, dict] | None:
    """(digest, document) of the contract the stored records follow (None before the first batch)."""
    cur.execute("SELECT digest, document FROM contracts ORDER BY adopted_at DESC LIMIT 1")
    row = cur.fetchone()
    return None if row is None else (row[0], row[1])


def check_contract(cur, contract: Contract, pipeline: str) -> None:
    """Before a batch commits (and before a run starts): record ``contract`` when no batch used one, or when it
    changed compatibly; refuse an incompatible change (:class:`ContractChanged`, saying the way forward)."""
    stored = stored_contract(cur)
    if stored is not None and stored[0] == contract.digest:
        return
    change = refuse_incompatible_contract(cur, contract, pipeline)
    record_contract(cur, contract, "first batch" if change is None else f"compatible: {change.describe()}")


def refuse_incompatible_contract(cur, contract: Contract, pipeline: str):  # -> ContractChange | None
    """The change from the stored contract to ``contract`` (None: no batch used one yet), or
    :class:`ContractChanged` when the stored records cannot follow it. Records nothing."""
    from spark_jobs.pipelines import contract_change

    stored = stored_contract(cur)
    if stored is None:
        return None
    change = contract_change(stored[1], contract)
    if not change.compatible:
        raise ContractChanged(
            f"pipeline {pipeline!r}: the contract changed in a way the stored records cannot follow "
            f"({change.describe()}). Put the contract back as it was, or declare the new shape as a new pipeline "
            "(another name and topic) and move its producers there"
        )
    return change


def record_contract(cur, contract: Contract, change: str) -> None:
    cur.execute(
        "INSERT INTO contracts (digest, document, change) VALUES (%s, %s, %s) ON CONFLICT (digest) DO UPDATE "
        "SET adopted_at = clock_timestamp(), change = EXCLUDED.change",
        (contract.digest, json.dumps(contract.document()), change),
    )
