#!/usr/bin/env bash
# The Kafka distribution's bin/kafka-configs.sh, from the broker jars (kafka.admin.ConfigCommand is
# in kafka_2.13): the healthcheck asks the broker for its configs through the admin API.
exec java -Xmx64m -cp '/opt/kafka/libs/*' kafka.admin.ConfigCommand "$@"
