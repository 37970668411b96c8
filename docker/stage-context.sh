#!/usr/bin/env bash
# The build context of the local images (docker/local/*.Dockerfile), without the wheelhouse that
# docker/build-images.sh links in: the repository's files under src/, the jars `make jars` fetched
# and built under jars/, and the start scripts. tests/unit/deploy/test_image_contents.py stages it
# the same way to check that everything the runtime reads by default is in it.
#
# Usage: docker/stage-context.sh CONTEXT   (run from the repository root; CONTEXT is emptied first)
set -euo pipefail

CONTEXT=${1:?usage: docker/stage-context.sh CONTEXT}
rm -rf "$CONTEXT" && mkdir -p "$CONTEXT/src" "$CONTEXT/jars"
cp -rL .tidemark/jars/spark .tidemark/jars/contract .tidemark/jars/kafka "$CONTEXT/jars/"
cp -r requirements.lock pyproject.toml README.md spark_jobs tidemark sql dags plugins "$CONTEXT/src/"
find "$CONTEXT/src" -name __pycache__ -prune -exec rm -rf {} +
cp docker/local/kafka-run.sh docker/local/kafka-configs.sh docker/local/postgres-run.sh "$CONTEXT/"
