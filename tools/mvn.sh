#!/usr/bin/env bash
# Maven as the Makefile runs it: batch mode, quiet, the project's settings (Maven Central only).
# Maven 3.8 writes colour resets (ESC[0m) even in batch mode and to a pipe, whatever -Dstyle.color or
# jansi's options say; they are stripped here, and Maven's exit status is kept.
set -o pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
mvn -B -q -s "$here/jvm/settings.xml" "$@" 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g'
