"""The embedded default's services: a single-node Kafka (KRaft) and a local PostgreSQL."""

from tidemark.embedded.kafka_broker import KafkaBroker
from tidemark.embedded.postgres_server import PostgresServer
from tidemark.embedded.process import ServiceError

__all__ = ["KafkaBroker", "PostgresServer", "ServiceError"]
