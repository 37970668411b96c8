"""The failures a user can fix, as one family.

A :class:`TidemarkError`'s message says what is wrong and what to do, in one line: the ``tidemark``
command prints it and exits with status 2, the Airflow tasks fail without retrying. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class TidemarkError(Exception):
    """A failure the user can fix; the message says how."""


class ConfigError(TidemarkError, ValueError):
    """Bad parameters or settings (a range that ends before it starts, an unknown partition, ...)."""


class ServiceUnavailable(TidemarkError, ConnectionError):
    """Kafka or PostgreSQL cannot be reached."""


class TopicError(TidemarkError):
    """A topic is missing or misconfigured."""


class TopicRecreated(TopicError):
    """The topic behind a name is not the one the ledger's ranges were read from."""


class DataLossError(TidemarkError):
    """Offsets a plan needs are no longer on the broker (retention or deletion)."""


class WriterBusy(TidemarkError):
    """Another run holds the single-writer lock."""


class ReconcileBusy(TidemarkError):
    """Another reconcile run is checking the sinks."""


class WriterFenced(TidemarkError):
    """The run lost the writer lock (another run took over, or its connection was closed)."""


class SessionRulesChanged(TidemarkError):
    """A run's session rules differ from the rules the stored sessions were built with."""


class LedgerConflict(TidemarkError):
    """The ledger and the run disagree about a batch (a checkpoint reset or moved)."""
