#!/usr/bin/env bash
# Every test, with everything the tests need installed first (runc, umoci and a Debian image made
# with mmdebstrap, Chromium, cargo-nextest, moto, cargo-lambda, aws-sam-cli, the MCP Python SDK and
# E2B's Python and JS SDKs). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# A one-off build (CI, a fresh clone) gains nothing from incremental caches, which would take
# tens of gigabytes for this many test binaries.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

ensure_runc
ensure_image_tools
ensure_debian_image
ensure_chromium
if ! command -v python3 >/dev/null 2>&1; then apt_install python3; fi
if ! cargo nextest --version >/dev/null 2>&1; then
  say "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi
ensure_moto
ensure_lambda_tools
ensure_mcp_sdk
ensure_e2b_sdks

say "format check"
cargo fmt --all -- --check
# The sandbox's command runner is built by crates/runc/build.rs, outside every cargo target.
RUNNER_SOURCE=crates/runc/runner/main.rs
rustfmt --edition 2021 --check "$RUNNER_SOURCE"

say "lint"
cargo clippy --workspace --all-targets --all-features -- -D warnings
runner_lint_dir=$(mktemp -d)
clippy-driver --edition 2021 -D warnings --crate-type bin --emit=metadata \
  --out-dir "$runner_lint_dir" "$RUNNER_SOURCE"
rm -rf "$runner_lint_dir"

say "each package on its own features"
# The lint above builds everything with every feature on, which hides a function (or a crate on its
# defaults) that no longer compiles with only the features it asks for. The packages that make a
# binary are checked once more without their dev-dependencies, whose features would otherwise fill
# in what a release build of that binary alone (`scripts/dev.sh`'s `cargo build -p threadbox`,
# `cargo lambda build -p pause`) lacks. A library is only ever built inside one of those binaries,
# so their checks cover it as it ships, and checking each library alone too would cost a minute.
cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in sorted(json.load(sys.stdin)["packages"], key=lambda p: p["name"]):
    makes_binary = any("bin" in t["kind"] for t in p["targets"])
    print(p["name"], "binary" if makes_binary else "library")' \
  | while read -r package kind; do
      cargo check --quiet -p "$package" --all-targets
      if [ "$kind" = binary ]; then cargo check --quiet -p "$package"; fi
    done

say "SAM template (sam validate --lint)"
sam validate --lint --template-file infra/template.yaml --region us-east-1

say "moto's server (DynamoDB and SQS for the AWS adapters' tests)"
trap stop_moto EXIT
start_moto

say "tests"
# The sandbox tests skip on a machine that cannot run runc; here that would hide a broken set-up.
export THREADBOX_REQUIRE_SANDBOXES=1
# The same for the local Lambda loop test, which needs cargo-lambda (installed above).
export THREADBOX_REQUIRE_LAMBDA=1
# The `threadbox mcp` test's client, the MCP Python SDK (installed above).
THREADBOX_MCP_PYTHON="$(pwd)/$MCP_VENV/bin/python"
export THREADBOX_MCP_PYTHON
# The E2B API test's clients, E2B's Python and JS SDKs (installed above).
THREADBOX_E2B_PYTHON="$(pwd)/$E2B_PY_VENV/bin/python"
THREADBOX_E2B_JS_DIR="$(pwd)/$E2B_JS_DIR"
export THREADBOX_E2B_PYTHON THREADBOX_E2B_JS_DIR
# The IAM check (tests/tests/iam.rs): the SAM translator expands the template, moto's policy
# evaluation judges each recorded call. THREADBOX_REQUIRE_AWS (set by start_moto) makes a
# missing venv a failure.
THREADBOX_SAM_PYTHON="$(pwd)/$LAMBDA_VENV/bin/python"
THREADBOX_MOTO_PYTHON="$(pwd)/$MOTO_VENV/bin/python"
export THREADBOX_SAM_PYTHON THREADBOX_MOTO_PYTHON
# First under cargo test, a Rust developer's first command: the tests must not depend on
# nextest's process per test. Then under nextest, whose summary closes the run.
cargo test --workspace --all-features --no-fail-fast --quiet

say "tests under nextest"
# Nextest exits 4 when a filter matches no test; an unfiltered workspace run always has tests,
# so any non-zero status here is a real failure.
cargo nextest run --workspace --all-features --no-fail-fast
