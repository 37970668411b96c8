#!/usr/bin/env bash
# The build context of the local images (docker/local/*.Dockerfile), without the wheelhouse that
# docker/build-images.sh links in: the repository's files docker/image-files lists under src/, the
# jars `make jars` fetched and built under jars/, and the start scripts.
# tests/unit/deploy/test_image_contents.py stages it the same way to check that everything the
# runtime reads by default is in it.
#
# Usage (from the repository root; the folder is emptied first):
#   docker/stage-context.sh CONTEXT           the local images' build context
#   docker/stage-context.sh --src-only DEST   only the files docker/image-files lists, into DEST
#                                             (docker/airflow/Dockerfile's `src` stage)
set -euo pipefail

stage_src() {  # DEST: every path docker/image-files lists, at the same relative path
    local dest=$1 path
    mkdir -p "$dest"
    grep -vE '^[[:space:]]*(#|$)' docker/image-files | while read -r path; do
        [ -e "$path" ] || { echo "docker/image-files: $path does not exist" >&2; exit 1; }
        cp -r --parents "$path" "$dest/"
    done
    find "$dest" -name __pycache__ -prune -exec rm -rf {} +
}

if [ "${1:-}" = --src-only ]; then
    DEST=${2:?usage: docker/stage-context.sh --src-only DEST}
    rm -rf "$DEST" && stage_src "$DEST"
    exit
fi
CONTEXT=${1:?usage: docker/stage-context.sh CONTEXT}
rm -rf "$CONTEXT" && mkdir -p "$CONTEXT/jars"
stage_src "$CONTEXT/src"
cp -rL .tidemark/jars/spark .tidemark/jars/contract .tidemark/jars/kafka .tidemark/jars/registry "$CONTEXT/jars/"
cp docker/local/kafka-run.sh docker/local/kafka-configs.sh docker/local/postgres-run.sh "$CONTEXT/"
