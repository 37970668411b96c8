# The tidemark image built offline (`make images`, docker/build-images.sh): the same image as
# docker/airflow/Dockerfile, from the host-built Debian base instead of python:3.11-slim and from the
# staged wheelhouse and jars instead of PyPI and Maven. Build context: .tidemark/docker/context.
ARG BASE=tidemark-base:bookworm

# --- the virtualenv, from the wheelhouse only (every hash of requirements.lock checked) -------------
# Compiled to bytecode here, as in docker/airflow/Dockerfile (the image sets PYTHONDONTWRITEBYTECODE).
FROM ${BASE} AS venv
COPY wheelhouse/ /wh/
COPY src/requirements.lock /tmp/requirements.lock
# Debian's python3.11 is EXTERNALLY-MANAGED (and has no pip): everything goes into /opt/venv.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install -q --no-index --no-cache-dir /wh/uv-*.whl \
    && /opt/venv/bin/uv pip sync --offline --no-index --no-cache --compile-bytecode --find-links /wh \
        --python /opt/venv/bin/python /tmp/requirements.lock

# --- runtime -----------------------------------------------------------------------------------
FROM ${BASE}
ARG AIRFLOW_UID=50000
# The Spark runtime is the pyspark package (SPARK_HOME); driver and executors run this interpreter.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AIRFLOW_HOME=/opt/airflow \
    TIDEMARK_HOME=/opt/airflow/tidemark \
    TIDEMARK_JARS_DIR=/opt/tidemark/jars \
    VIRTUAL_ENV=/opt/venv \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY --from=venv /opt/venv /opt/venv
COPY jars/spark/ /opt/tidemark/jars/spark/
COPY jars/contract/ /opt/tidemark/jars/contract/
COPY wheelhouse/setuptools-*.whl wheelhouse/wheel-*.whl /tmp/build-backend/
WORKDIR /opt/tidemark
# docker/image-files: what the image carries (pipelines.yaml, sql/, dags/, plugins/, the packages).
COPY src/ ./
# Editable on purpose, as in docker/airflow/Dockerfile: `tidemark db migrate` finds sql/ next to the
# packages and spark-submit takes the entry points from /opt/tidemark/spark_jobs.
RUN uv pip install -q --offline --no-index --no-cache --find-links /tmp/build-backend --no-deps -e . \
    && rm -rf /tmp/build-backend \
    && python -m compileall -q spark_jobs tidemark dags plugins
RUN useradd --uid "${AIRFLOW_UID}" --gid 0 --create-home --home-dir /home/airflow airflow \
    && mkdir -p /opt/airflow/logs "${TIDEMARK_HOME}" /data/lake /data/checkpoints \
    && chown -R "${AIRFLOW_UID}:0" /opt/airflow /data \
    && chmod -R g+rwX /opt/airflow /data
USER airflow
WORKDIR /opt/airflow
