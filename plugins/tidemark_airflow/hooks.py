"""A hook over the Kafka topic tidemark reads: watermarks, offsets for times, committed-record counts."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import BaseHook

from tidemark_airflow.connections import KAFKA_CONN_ID, kafka_env


class KafkaOffsetsHook(BaseHook):
    """Read-only offset questions about a topic, through the ``tidemark_kafka`` connection.

    :param kafka_conn_id: connection whose extra holds Kafka client options (``bootstrap.servers``, ...)
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = KAFKA_CONN_ID
    conn_type = "generic"
    hook_name = "tidemark Kafka offsets"

    def __init__(self, kafka_conn_id: str = KAFKA_CONN_ID) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def _settings(self):  # -> spark_jobs.settings.Settings
        from spark_jobs.settings import Settings

        extra = self.get_connection(self.kafka_conn_id).extra_dejson
        return Settings.from_env(kafka_env(extra, self.kafka_conn_id))

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """``{partition: (low, high)}`` the broker holds now; TopicError for an unknown topic."""
        from spark_jobs.offsets import watermarks

        return dict(watermarks(self._settings(), topic))

    def offsets_for_time(self, topic: str, when: datetime) -> dict[int, int]:
        """Per partition, the first offset whose arrival timestamp is at or after ``when``."""
        from spark_jobs.offsets import offsets_for_time

        return offsets_for_time(self._settings(), topic, when)

    def count_committed(self, topic: str, partition: int, start: int, end: int) -> int:
        """Committed records in [start, end), counted by reading (not by offset arithmetic)."""
        from spark_jobs.committed import count_committed
        from spark_jobs.offsets import PartitionRange

        return count_committed(self._settings(), PartitionRange(topic, partition, start, end))
