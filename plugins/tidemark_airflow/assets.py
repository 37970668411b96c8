"""The Asset a successful ingest or backfill updates; reconciliation is scheduled on it."""

from airflow.sdk import Asset

SINKS = Asset(name="tidemark_sinks", uri="tidemark://sinks")
