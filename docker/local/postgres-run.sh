#!/usr/bin/env bash
# Entrypoint of tidemark-postgres, with the postgres image's first-start contract: when $PGDATA is
# empty, initdb with POSTGRES_PASSWORD for `postgres` (password auth over TCP, trust on the socket),
# run every /docker-entrypoint-initdb.d/*.sh against a server listening on its socket only, stop it;
# then the server runs in the foreground on every interface of the container.
set -euo pipefail
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" > "$pwfile"
    initdb --pgdata="$PGDATA" --username=postgres --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl --pgdata="$PGDATA" --wait -o "-c listen_addresses='' -c unix_socket_directories=/run/postgresql" start
    for script in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$script" ] || continue
        echo "postgres-run.sh: running $script"
        bash "$script"
    done
    pg_ctl --pgdata="$PGDATA" --wait --mode=fast stop
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
