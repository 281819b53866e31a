#!/usr/bin/env bash
# Every benchmark in one run: the session core on SQLite and on DynamoDB (moto's server), the runc
# provider's latencies and memory, threadbox against bare runc (`floor`: issue 34's ratios, the
# wake time of a paused thread, where the time goes), the same wake on E2B's path against its
# contract fake with E2B's published resume latency injected (`wake`, threadbox-e2b), the
# WebSocket and Slack fan-out, the Slack ack path, the Lambda functions' sizes and cold starts,
# and 1,000 threads of load through the real `threadbox dev`.
# All in ONE `cargo bench` invocation; what the benchmarks print (and the machine they ran on)
# goes to target/bench-report.txt, which BENCHMARKS.md is written from.
#
# Needs root (runc containers) and takes a while: the first release build of the workspace with
# every feature is the slow part on 2 cores. Everything runs on loopback; the load is bounded.
# Not part of scripts/test.sh: CI must stay fast.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_runc
if ! command -v python3 >/dev/null 2>&1; then apt_install python3; fi
ensure_moto

REPORT="target/bench-report.txt"
mkdir -p target

# Every feature the benchmarks need, and not the test-only fault points (`fault-injection`), so
# the binaries measured are the ones people run.
features=(threadbox-aws/dynamo threadbox-aws/sqs threadbox-tests/aws)
# The Lambda functions' cold-start benchmark (tests/benches/lambda_cold_start.rs) measures their
# release binaries: build them first, in one invocation.
functions=()
for manifest in functions/*/Cargo.toml; do
  [ -f "$manifest" ] && functions+=(-p "$(basename "$(dirname "$manifest")")")
done
if grep -q '^lambda = ' tests/Cargo.toml; then
  features+=(threadbox-tests/lambda)
fi
if [ ${#functions[@]} -gt 0 ]; then
  say "release build of the Lambda functions (their sizes and cold starts are measured)"
  cargo build --release "${functions[@]}"
fi

trap stop_moto EXIT
start_moto

command_line="cargo bench --workspace --bench '*' --features $(IFS=,; echo "${features[*]}")"
{
  echo "threadbox benchmark report"
  echo "date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:   $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!target' 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "command:  scripts/bench.sh, which runs: $command_line"
  echo "cpu:      $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores)"
  echo "memory:   $(free -h | awk '/^Mem:/ {print $2 " total, " $7 " available"}')"
  echo "kernel:   $(uname -sr)"
  echo "os:       $(. /etc/os-release && echo "$PRETTY_NAME")"
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo "cgroups:  v2 (unified)"
  else
    echo "cgroups:  v1 or hybrid (memory controller on v1)"
  fi
  echo "runc:     $(runc --version | head -n 1)"
  echo "rustc:    $(rustc --version)"
  echo "moto:     $MOTO_VERSION (DynamoDB and SQS stand-in, on loopback)"
} | tee "$REPORT"

say "every benchmark, one cargo invocation (build output and logs: target/bench-stderr.log)"
# Figures go to stdout (and the report); compiler output and logs to stderr (and their own file).
cargo bench --workspace --bench '*' --features "$(IFS=,; echo "${features[*]}")" \
  2> >(tee target/bench-stderr.log >&2) | tee -a "$REPORT"
say "report: $REPORT"
