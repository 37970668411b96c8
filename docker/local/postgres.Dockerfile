# PostgreSQL 15 (Debian bookworm's package) built offline (`make images`). postgres-run.sh keeps the
# contract of the postgres image that docker-compose.yaml relies on: POSTGRES_PASSWORD for the
# superuser `postgres`, data in /var/lib/postgresql/data, and on first start every
# /docker-entrypoint-initdb.d/*.sh run against a server that listens on its socket only.
ARG PG_BASE=tidemark-postgres-base:bookworm
FROM ${PG_BASE}
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
COPY postgres-run.sh /usr/local/bin/postgres-run.sh
RUN mkdir -p /docker-entrypoint-initdb.d "$PGDATA" /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql && chmod 700 "$PGDATA"
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
CMD ["/usr/local/bin/postgres-run.sh"]
