#!/usr/bin/env bash
# The main job: everything threadbox does, in one process on embedded defaults
# (SQLite store and queues, runc sandboxes, no AWS). Installs what is missing first.
# Extra arguments go to `threadbox dev` (see `threadbox dev --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_runc
say "building threadbox (release; the first build takes a few minutes)"
cargo build --release -p threadbox
exec ./target/release/threadbox dev "$@"
