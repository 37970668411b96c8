#!/usr/bin/env bash
# The system packages each make target needs, in one place. Every make target that needs more than
# make and bash runs `tools/system-packages.sh <target>` first (its prerequisite `system-<target>`):
# when something is missing, it installs it with apt-get (as root, or with password-less sudo), saying
# in one line what and why; otherwise it stops before any work with one line giving the command.
# Nothing is installed that the target does not need, and nothing is run when all is there.
#
# Usage: tools/system-packages.sh TARGET           check, and install what TARGET lacks
#        tools/system-packages.sh --missing TARGET print the Debian packages TARGET lacks here
#        tools/system-packages.sh --list TARGET    print every Debian package TARGET needs
set -euo pipefail

# What each target needs (the names of `present`, `packages` and `why` below).
needs() {
    case $1 in
        venv | lint | lock | status | doctor) echo python ;;
        jars | jars-s3) echo jdk maven ;;
        test-unit) echo python jdk maven ;;
        up | migrate | demo | airflow | bench | bench-long | test | test-integration | test-operations | \
            test-scenarios | test-deploy | fuzz | fuzz-found) echo python jdk maven postgres ;;
        test-airflow | ci) echo python jdk maven postgres chromium ;;
        images | compose-test) echo python jdk maven docker ;;
        test-fresh) echo docker ;;
        *) echo "tools/system-packages.sh: no make target '$1' is known here; add it to needs()" >&2; exit 2 ;;
    esac
}

# Whether this machine has what a need stands for.
present() {
    case $1 in
        # The Makefile's venv rule runs $PYTHON -m venv, which needs ensurepip (python3-venv on Debian).
        python) "${PYTHON:-python3}" -c 'import ensurepip, venv' >/dev/null 2>&1 ;;
        jdk) command -v javac >/dev/null && [ "$(java_major)" -ge 17 ] ;;
        maven) command -v mvn >/dev/null ;;
        # Debian keeps pg_ctl off PATH (tidemark/embedded/postgres_server.py looks in the same places).
        postgres) command -v pg_ctl >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null ;;
        chromium) command -v chromium >/dev/null && command -v chromedriver >/dev/null ;;
        docker) command -v dockerd >/dev/null && command -v mmdebstrap >/dev/null && command -v curl >/dev/null ;;
    esac
}

java_major() {
    javac -version 2>&1 | sed -nE 's/^javac ([0-9]+).*/\1/p' | head -1 | grep . || echo 0
}

# The Debian (and Ubuntu) packages that give a need.
packages() {
    case $1 in
        python) echo python3 python3-venv ;;
        jdk) echo openjdk-17-jdk-headless ;;
        maven) echo maven ;;
        postgres) echo postgresql ;;
        chromium) echo chromium chromium-driver ;;
        docker) echo docker.io mmdebstrap curl ;;
    esac
}

why() {
    case $1 in
        python) echo "Python 3.11 with venv makes .venv" ;;
        jdk) echo "Spark and Kafka run on Java 17+ and javac builds the contract check" ;;
        maven) echo "Maven fetches the pinned jars" ;;
        postgres) echo "the PostgreSQL server runs the sinks and the ledger" ;;
        chromium) echo "the Airflow UI tests drive a headless Chromium" ;;
        docker) echo "the Docker engine and mmdebstrap build and run the local images" ;;
    esac
}

main() {
    local mode=check target
    case ${1:-} in
        --missing | --list) mode=${1#--}; shift ;;
    esac
    target=${1:?usage: tools/system-packages.sh [--missing|--list] TARGET}
    local wanted=() reasons=() need all
    all=$(needs "$target")
    for need in $all; do
        if [ "$mode" = list ] || ! present "$need"; then
            read -ra more <<<"$(packages "$need")"
            wanted+=("${more[@]}")
            reasons+=("$(why "$need")")
        fi
    done
    if [ "$mode" != check ]; then
        echo "${wanted[*]}"
        return
    fi
    [ ${#wanted[@]} -eq 0 ] && return
    install "$target" "$(IFS=';'; echo "${reasons[*]}" | sed 's/;/; /g')" "${wanted[@]}"
}

install() {  # TARGET REASONS PACKAGE...
    local target=$1 reasons=$2 sudo=()
    shift 2
    local command="sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends $*'"
    if ! command -v apt-get >/dev/null; then
        echo "tidemark: make $target needs $* (Debian's names; $reasons): install them with this system's package manager" >&2
        exit 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "tidemark: make $target needs $* ($reasons); run: $command" >&2
            exit 1
        fi
    fi
    echo "tidemark: make $target installs $* with apt-get ($reasons)"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    local left
    left=$(main --missing "$target")
    if [ -n "$left" ]; then
        echo "tidemark: make $target still lacks $left after apt-get install; install a JDK 17+ or what is named, then run it again" >&2
        exit 1
    fi
}

main "$@"
