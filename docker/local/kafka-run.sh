#!/usr/bin/env bash
# Entrypoint of tidemark-kafka: KAFKA_* variables become server.properties the way the apache/kafka
# image maps them (KAFKA_ dropped, lower case, `_` -> `.`, `__` -> `_`, `___` -> `-`; KAFKA_HEAP_OPTS
# and KAFKA_OPTS are JVM options), the log directory is formatted once with CLUSTER_ID, then the
# broker runs in the foreground.
set -euo pipefail
config=/opt/kafka/config
: > "$config/server.properties"
for var in $(compgen -e); do
    case $var in
        KAFKA_HEAP_OPTS | KAFKA_OPTS) ;;
        KAFKA_*)
            key=${var#KAFKA_}; key=${key,,}
            key=${key//___/-}; key=${key//__/@}; key=${key//_/.}; key=${key//@/_}
            printf '%s=%s\n' "$key" "${!var}" >> "$config/server.properties" ;;
    esac
done
printf '%s\n' 'rootLogger.level=INFO' 'rootLogger.appenderRef.stdout.ref=stdout' \
    'appender.stdout.type=Console' 'appender.stdout.name=stdout' 'appender.stdout.layout.type=PatternLayout' \
    'appender.stdout.layout.pattern=[%d] %p %m (%c)%n' > "$config/log4j2.properties"
java=(java ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*'
      -Dlog4j2.configurationFile="$config/log4j2.properties")
log_dirs=$(sed -n 's/^log\.dirs=//p' "$config/server.properties")
if [ ! -e "${log_dirs%%,*}/meta.properties" ]; then
    "${java[@]}" kafka.tools.StorageTool format -t "${CLUSTER_ID:?set CLUSTER_ID}" -c "$config/server.properties"
fi
exec "${java[@]}" -XX:+UseG1GC kafka.Kafka "$config/server.properties"
