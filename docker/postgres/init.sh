#!/usr/bin/env bash
# First-start initialisation of the compose stack's PostgreSQL (the official image, and the local
# tidemark-postgres image's docker/local/postgres-run.sh, run this from /docker-entrypoint-initdb.d
# once, when the data volume is empty). Migrations run later (airflow-init) and leave
# schema_migrations read-only for the pipeline themselves.
#
#   airflow            owns database `airflow` (Airflow's metadata; `airflow db migrate` fills it)
#   tidemark_owner     owns database `tidemark`; `tidemark db migrate` runs as this role
#   tidemark_pipeline  reads and writes rows in `tidemark` (what the DAGs and Spark jobs use), no DDL
#   schema_registry    owns database `schema_registry` (the schema registry's storage; it makes its tables)
#
# The tidemark roles and database come from sql/roles/roles.sql (mounted at $TIDEMARK_ROLES_SQL),
# the same script an administrator runs against any other PostgreSQL server.
#
# Passwords come from the container's environment (docker-compose.yaml passes them from .env) and
# reach SQL as psql variables, which psql quotes as literals.
set -eo pipefail

ROLES_SQL="${TIDEMARK_ROLES_SQL:-/opt/tidemark/roles.sql}"

for var in AIRFLOW_DB_PASSWORD TIDEMARK_OWNER_PASSWORD TIDEMARK_PIPELINE_PASSWORD SCHEMA_REGISTRY_DB_PASSWORD; do
    if [ -z "${!var}" ]; then
        echo "init.sh: $var is not set; set it in .env next to docker-compose.yaml" >&2
        exit 1
    fi
done
if [ ! -r "$ROLES_SQL" ]; then
    echo "init.sh: $ROLES_SQL is missing; mount sql/roles/roles.sql there (see docker-compose.yaml)" >&2
    exit 1
fi

psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}")

"${psql[@]}" -v airflow_password="$AIRFLOW_DB_PASSWORD" <<'SQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
REVOKE ALL ON DATABASE airflow FROM PUBLIC;
SQL

"${psql[@]}" -v registry_password="$SCHEMA_REGISTRY_DB_PASSWORD" <<'SQL'
CREATE ROLE schema_registry LOGIN PASSWORD :'registry_password';
CREATE DATABASE schema_registry OWNER schema_registry;
REVOKE ALL ON DATABASE schema_registry FROM PUBLIC;
SQL

"${psql[@]}" --quiet \
    -v owner=tidemark_owner -v pipeline=tidemark_pipeline -v dbname=tidemark \
    -v owner_password="$TIDEMARK_OWNER_PASSWORD" \
    -v pipeline_password="$TIDEMARK_PIPELINE_PASSWORD" \
    -f "$ROLES_SQL"
