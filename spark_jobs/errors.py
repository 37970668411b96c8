"""The failures a user can fix, as one family.

A :class:`TidemarkError`'s message says what is wrong and what to do, in one line: the ``tidemark``
command prints it and exits with status 2, the Airflow tasks fail without retrying. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Callable

# Where a spark-submitted job writes its one-line cause when it fails with a TidemarkError: the
# Airflow task that submitted it makes that the first line of its error (and of the alert).
ERROR_FILE = "TIDEMARK_ERROR_FILE"


def run_job(main: Callable[[], None]) -> None:
    """A job's entry under spark-submit: a :class:`TidemarkError` is one line on stderr (and in the
    file ``TIDEMARK_ERROR_FILE`` names), exit status 2; anything else keeps its traceback."""
    import os
    import sys

    try:
        main()
    except TidemarkError as exc:
        from spark_jobs.secrets import redact

        line = redact(str(exc))
        if os.environ.get(ERROR_FILE):
            with open(os.environ[ERROR_FILE], "w") as f:
                f.write(line)
        print(f"tidemark: {line}", file=sys.stderr)
        sys.exit(2)


class TidemarkError(Exception):
    """A failure the user can fix; the message says how."""


class ConfigError(TidemarkError, ValueError):
    """Bad parameters or settings (a range that ends before it starts, an unknown partition, ...)."""


class ServiceUnavailable(TidemarkError, ConnectionError):
    """Kafka or PostgreSQL cannot be reached."""


class NotMigrated(TidemarkError):
    """The database lacks a table tidemark's migrations create."""


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


class ContractChanged(TidemarkError):
    """The pipeline's contract changed in a way the records already stored cannot follow (a role moved, a
    typed column narrowed or dropped): refused before any work, saying the way forward."""


class LedgerConflict(TidemarkError):
    """The ledger and the run disagree about a batch (a checkpoint reset or moved)."""
