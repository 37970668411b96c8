#!/usr/bin/env bash
# The Docker engine `make images`, `make compose-test` and `make test-fresh` need (run as root):
#   * dockerd, containerd, runc (Debian 12's docker.io, engine 20.10, API 1.41) and mmdebstrap, which
#     builds the Debian root filesystems of the local images: those make targets install them first
#     (tools/system-packages.sh, their system-<target> step).
#   * the Compose v2 CLI plugin, pinned to COMPOSE_VERSION: built from its Go module (the Go module
#     proxy) with the host's Go, or with the Go toolchain module golang.org/toolchain when there is
#     no Go 1.24+ on the machine.
#   * dockerd itself, started in the background when none answers (no systemd here); its PID goes
#     to .tidemark/docker/dockerd.pid so that `docker/engine.sh stop` stops only what it started.
#
# Usage: docker/engine.sh start | stop
set -euo pipefail

COMPOSE_VERSION=v2.40.3        # the last v2 release on the Go module proxy (later: .../compose/v5)
GO_TOOLCHAIN=go1.24.9          # compose v2.40.3's go.mod asks for go 1.24.9
WORK=$(pwd)/.tidemark/docker
PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose
PID_FILE=$WORK/dockerd.pid
mkdir -p "$WORK"

# A Go that can build compose: the machine's if new enough, else the toolchain module from the proxy.
go_binary() {
    if command -v go >/dev/null && go version | grep -qE 'go1\.(2[4-9]|[3-9][0-9])'; then
        command -v go; return
    fi
    local dir=$WORK/go-toolchain zip=$WORK/go-toolchain.zip
    if [ ! -x "$dir/bin/go" ]; then
        echo "engine.sh: fetching the Go toolchain module golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" >&2
        curl -fsSL -o "$zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" && (cd "$dir.tmp" && python3 -m zipfile -e "$zip" .)
        mv "$dir.tmp/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" "$dir" && rm -rf "$dir.tmp" "$zip"
        chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
    fi
    echo "$dir/bin/go"
}

install_compose() {
    if docker compose version 2>/dev/null | grep -q "$COMPOSE_VERSION"; then return; fi
    echo "engine.sh: building the Compose plugin $COMPOSE_VERSION from its Go module"
    local go src build=$WORK/compose-build
    go=$(go_binary)
    export GOPATH=$build/gopath GOCACHE=$build/gocache GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=local
    export GOPROXY=${GOPROXY:-https://proxy.golang.org}
    src=$("$go" mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    # `go install ...@version` refuses compose (its go.mod has exclude directives): build in a copy.
    rm -rf "$build/src" && cp -r "$src" "$build/src" && chmod -R u+w "$build/src"
    (cd "$build/src" && nice -n 10 "$go" build -trimpath \
        -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" -o "$build/docker-compose" ./cmd)
    install -D -m 0755 "$build/docker-compose" "$PLUGIN"
    chmod -R u+w "$build" && rm -rf "$build"
    docker compose version
}

start() {
    command -v dockerd >/dev/null || {
        echo "engine.sh: no Docker engine here; run it through make (make images installs it) or: tools/system-packages.sh images" >&2
        exit 1
    }
    if ! docker info >/dev/null 2>&1; then
        [ "$(id -u)" -eq 0 ] || { echo "engine.sh: no Docker engine answers, and only root can start one" >&2; exit 1; }
        echo "engine.sh: starting dockerd (log: $WORK/dockerd.log)"
        nohup dockerd > "$WORK/dockerd.log" 2>&1 &
        echo $! > "$PID_FILE"
        for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
        docker info >/dev/null 2>&1 || { tail -20 "$WORK/dockerd.log"; exit 1; }
    fi
    install_compose
}

# Stops dockerd only when this script started it (its PID file), by that PID.
stop() {
    [ -f "$PID_FILE" ] || return 0
    local pid
    pid=$(cat "$PID_FILE")
    if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline"; then
        echo "engine.sh: stopping dockerd (pid $pid)"
        kill "$pid"
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
    rm -f "$PID_FILE"
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    *) echo "usage: docker/engine.sh start|stop" >&2; exit 2 ;;
esac
