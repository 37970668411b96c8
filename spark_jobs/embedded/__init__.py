"""The embedded default's services: a single-node Kafka (KRaft) and a local PostgreSQL."""

from spark_jobs.embedded.kafka_broker import KafkaBroker
from spark_jobs.embedded.postgres_server import PostgresServer
from spark_jobs.embedded.process import ServiceError

__all__ = ["KafkaBroker", "PostgresServer", "ServiceError"]
