#!/usr/bin/env bash
# First-start initialisation of the compose stack's PostgreSQL (the official image runs this from
# /docker-entrypoint-initdb.d once, when the data volume is empty).
#
#   airflow            owns database `airflow` (Airflow's metadata; `airflow db migrate` fills it)
#   tidemark_owner     owns database `tidemark`; `tidemark db migrate` runs as this role
#   tidemark_pipeline  reads and writes rows in `tidemark` (what the DAGs and Spark jobs use), no DDL
#
# Passwords come from the container's environment (docker-compose.yaml passes them from .env) and
# reach SQL as psql variables, which psql quotes as literals.
set -eo pipefail

for var in AIRFLOW_DB_PASSWORD TIDEMARK_OWNER_PASSWORD TIDEMARK_PIPELINE_PASSWORD; do
    if [ -z "${!var}" ]; then
        echo "init.sh: $var is not set; set it in .env next to docker-compose.yaml" >&2
        exit 1
    fi
done

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    -v airflow_password="$AIRFLOW_DB_PASSWORD" \
    -v owner_password="$TIDEMARK_OWNER_PASSWORD" \
    -v pipeline_password="$TIDEMARK_PIPELINE_PASSWORD" <<'SQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
REVOKE ALL ON DATABASE airflow FROM PUBLIC;

CREATE ROLE tidemark_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE tidemark_pipeline LOGIN PASSWORD :'pipeline_password';
CREATE DATABASE tidemark OWNER tidemark_owner;
REVOKE ALL ON DATABASE tidemark FROM PUBLIC;
-- TEMPORARY: the writer stages rows in a temp table before its upsert.
GRANT CONNECT, TEMPORARY ON DATABASE tidemark TO tidemark_pipeline;

\connect tidemark
-- Tables and sequences the migrations create (as tidemark_owner) are usable by the pipeline role.
ALTER DEFAULT PRIVILEGES FOR ROLE tidemark_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO tidemark_pipeline;
ALTER DEFAULT PRIVILEGES FOR ROLE tidemark_owner IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO tidemark_pipeline;
SQL
