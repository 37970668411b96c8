#!/usr/bin/env bash
# `make test-fresh`: the README's two commands on a machine that has nothing but Debian 12's minimal
# system, make and the CA certificates: no Python, no JDK, no Maven, no PostgreSQL, no Chromium. The
# machine is a container of a root filesystem mmdebstrap makes from Debian's packages (no registry),
# on the host's network (apt, PyPI and Maven Central are reached as the host reaches them; the ports
# of `make demo` and `make test` must be free on the host). Inside it, on a clone of this
# repository's HEAD (committed work only, as CI takes it):
#
#   1. as a user without sudo, `make test` stops in under a second with one line that names the
#      packages and the command, and nothing was done;
#   2. as root, `make demo`, then `make test`: every system package they need comes from their own
#      system-<target> step;
#   3. `make test-airflow`'s step, run by a user with password-less sudo, installs Chromium and its
#      driver through sudo (`make test` did not install them).
#
# Usage: docker/fresh-machine.sh [--rebuild-base]   (root, a Docker engine running: `make test-fresh`)
set -euo pipefail

ROOT=$(pwd)
WORK=$ROOT/.tidemark/fresh             # ignored by git; the clone, its venv, jars and data
SUITE=bookworm
IMAGE=tidemark-fresh:$SUITE
REBUILD_BASE=${1:-}
ROOTFS_ENV=(LANG=C.UTF-8)
# shellcheck source=docker/rootfs.sh
. docker/rootfs.sh

import_rootfs "$IMAGE" make,ca-certificates
mkdir -p "$WORK"

# The machine's own trust: the certificates this host trusts that Debian's ca-certificates does not
# (where the network inspects TLS, its proxy's CA) are the fresh machine's too, as on every machine of
# this network; tidemark installs none of them. Without them PyPI and Maven Central fail TLS inside.
docker run --rm "$IMAGE" cat /etc/ssl/certs/ca-certificates.crt > "$WORK/debian-bundle.crt"
rm -rf "$WORK/host-trust" && mkdir -p "$WORK/host-trust"
python3 - /etc/ssl/certs/ca-certificates.crt "$WORK/debian-bundle.crt" "$WORK/host-trust" <<'PY'
import pathlib, re, sys
pem = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)
host, debian = (pem.findall(open(path).read()) for path in sys.argv[1:3])
for n, certificate in enumerate(c for c in host if c not in set(debian)):
    pathlib.Path(sys.argv[3], f"host-{n}.crt").write_text(certificate + "\n")
PY

echo "== a clone of $(git rev-parse --short HEAD) in $WORK/src"
rm -rf "$WORK/src"
git clone -q --no-local "$ROOT" "$WORK/src"

# The steps inside the machine; each prints its time, and any failure fails the run.
read -r -d '' steps <<'STEPS' || true
set -euo pipefail
update-ca-certificates >/dev/null
step() { echo "== fresh machine: $*"; started=$SECONDS; }
took() { echo "== fresh machine: took $((SECONDS - started)) s"; }

step "make test as a user without sudo stops at once"
useradd --create-home newcomer
begun=$(date +%s%N)
if runuser -u newcomer -- make test >/tmp/refused 2>&1; then
    echo "make test ran as a user who cannot install its packages"; exit 1
fi
elapsed_ms=$(( ($(date +%s%N) - begun) / 1000000 ))
cat /tmp/refused
grep -c '^tidemark: make test needs .*openjdk-17-jdk-headless.*postgresql.*; run: sudo sh -c .apt-get update && apt-get install' /tmp/refused \
    | grep -qx 1 || { echo "not the one line naming the packages and the command"; exit 1; }
[ "$elapsed_ms" -lt 1000 ] || { echo "it took $elapsed_ms ms"; exit 1; }
[ ! -e .venv ] && [ ! -e .tidemark ] || { echo "it did work before it stopped"; exit 1; }
echo "stopped after $elapsed_ms ms"

step "make demo"; make demo; took
step "make test"; make test; took
step "make test-airflow's system step, as a user with password-less sudo"
! command -v chromium >/dev/null || { echo "make demo or make test installed Chromium"; exit 1; }
apt-get install -y -qq --no-install-recommends sudo >/dev/null
useradd --create-home sudoer && echo "sudoer ALL=(ALL) NOPASSWD: ALL" > /etc/sudoers.d/sudoer
runuser -u sudoer -- tools/system-packages.sh test-airflow
command -v chromium chromedriver
make down
STEPS

# And the machine's environment that points programs at that trust (uv reads SSL_CERT_FILE).
trust_env=()
for name in SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_CERT; do
    [ -n "${!name:-}" ] && trust_env+=(-e "$name")
done
docker run --rm --network host "${trust_env[@]}" --shm-size 1g -v "$WORK/src:/src" -w /src \
    -v "$WORK/host-trust:/usr/local/share/ca-certificates/host-trust:ro" "$IMAGE" bash -c "$steps"
echo "== fresh machine: all steps passed"
