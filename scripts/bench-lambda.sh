#!/usr/bin/env bash
# The Lambda functions' release binary sizes and cold starts (tests/benches/lambda_cold_start.rs):
# builds every function in one release invocation (the shared crate compiles once for all of
# them), starts moto's server, and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

FUNCTIONS=(resolve-session pause resume sandbox-api janitor fanout slack-events worker)
packages=()
for f in "${FUNCTIONS[@]}"; do packages+=(-p "$f"); done
say "release build of ${FUNCTIONS[*]} (one cargo invocation; slow the first time on 2 cores)"
cargo build --release "${packages[@]}"

ensure_moto
trap stop_moto EXIT
start_moto

say "cold starts"
# The harness itself only accepts connections and reads clocks: the dev profile is plenty, and
# reuses the test build instead of compiling the test crates again with release settings.
cargo bench -p threadbox-tests --features aws,lambda --bench lambda_cold_start --profile dev
