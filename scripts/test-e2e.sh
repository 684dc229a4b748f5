#!/usr/bin/env bash
# Runs the e2e tier (test/e2e: labs, as root) verbosely into a log and prints one line per
# test with its duration, so a CI log shows where the time goes. On failure it prints the
# whole output of each failing top-level test.
# Usage: [E2E_LOG=file] scripts/test-e2e.sh GO TIMEOUT [go test flags...]
set -uo pipefail
go=$1 timeout=$2
shift 2
log=${E2E_LOG:-e2e-results/e2e.log}
mkdir -p e2e-results
echo "e2e: go test -v ./test/e2e/ (full log: $log)"
"$go" test -count=1 -timeout "$timeout" -v "$@" ./test/e2e/ >"$log" 2>&1
rc=$?
grep -E '^ *--- (PASS|FAIL|SKIP)|^(ok|FAIL|panic)' "$log"
if [ "$rc" -ne 0 ]; then
	echo "e2e: failed (exit $rc); output of the failing tests:"
	awk '/^=== RUN   [^\/]+$/ { buf = "" } { buf = buf $0 "\n" } /^--- FAIL: / { printf "%s", buf }' "$log"
	grep -q -E '^panic|test timed out' "$log" && tail -n 200 "$log"
fi
exit "$rc"
