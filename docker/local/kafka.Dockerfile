# Apache Kafka 4.1.2 (KRaft) built offline (`make images`): Debian has no Kafka package, so the
# broker runs from the jars jvm/kafka/pom.xml pins (`make jars`), as `tidemark up` runs it, on the
# host-built Debian base. kafka-run.sh reads the same KAFKA_* variables as the apache/kafka image.
ARG BASE=tidemark-base:bookworm
FROM ${BASE}
COPY jars/kafka/ /opt/kafka/libs/
COPY kafka-run.sh kafka-configs.sh /opt/kafka/bin/
# uid 1000 as in apache/kafka; a new named volume takes the ownership of /var/lib/kafka/data.
RUN useradd --uid 1000 --user-group --no-create-home --home-dir /opt/kafka kafka \
    && mkdir -p /var/lib/kafka/data /opt/kafka/config \
    && chown -R kafka:kafka /var/lib/kafka /opt/kafka/config
USER kafka
EXPOSE 9092
CMD ["/opt/kafka/bin/kafka-run.sh"]
