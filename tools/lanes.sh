#!/usr/bin/env bash
# Runs each argument, a bash command, in a lane of its own, all at the same time (`make ci`: the test
# suites in two lanes on a 2-core machine). Every line a lane prints comes out as it is printed, after
# `[lane N]`, and is kept whole in .tidemark/ci/lane-N.log (or under $LANES_LOGS). Waits for every lane;
# exits 0 when each did, else with the status of the first lane that failed, after a line per lane saying
# how it ended. With $LANES_HISTORY set, a line per lane (when, commit, seconds, status) is appended to
# that file: the lanes' times over runs, to balance them by.
#
# Usage: tools/lanes.sh 'make test && make test-airflow' 'make test-operations'
set -uo pipefail
cd "$(dirname "$0")/.."

logs=${LANES_LOGS:-.tidemark/ci}
mkdir -p "$logs"
pids=()
for n in $(seq 1 $#); do
    (
        # pipefail: the lane's status is its command's, not the prefixing's.
        bash -c "${!n}" 2>&1 | tee "$logs/lane-$n.log" | sed -u "s/^/[lane $n] /"
        code=$?
        echo "[lane $n] ended after $((SECONDS / 60)) min $((SECONDS % 60)) s with status $code"
        if [ -n "${LANES_HISTORY:-}" ]; then
            mkdir -p "$(dirname "$LANES_HISTORY")"
            commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
            echo "$(date -u +%FT%TZ) $commit lane $n ${SECONDS} s status $code: ${!n}" >>"$LANES_HISTORY"
        fi
        exit "$code"
    ) &
    pids+=("$!")
done

status=0
for n in $(seq 1 $#); do
    if wait "${pids[$((n - 1))]}"; then
        echo "lane $n passed: ${!n}"
    else
        code=$?
        echo "lane $n FAILED (status $code): ${!n} (its whole output: $logs/lane-$n.log)"
        [ "$status" -ne 0 ] || status=$code
    fi
done
exit "$status"
