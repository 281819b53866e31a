# Shared helpers for the scripts in this folder. Sourced, not run.

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Run as root, or through sudo when not root.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=""
# apt_install PACKAGE...: install Debian packages that are missing, updating the index once.
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    say "missing ${missing[*]} and no apt-get here: install them with your package manager"
    return 1
  fi
  if [ -z "$apt_updated" ]; then
    say "apt-get update"
    as_root apt-get update -q
    apt_updated=1
  fi
  say "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

# The OCI runtime local sandboxes run on. crun does not work on hybrid cgroups; runc does.
ensure_runc() {
  command -v runc >/dev/null 2>&1 || apt_install runc
  # Networked sandboxes: links (ip), packet filters (nft), the test's HTTPS certificate
  # (openssl), and curl, which the network tests run inside sandboxes (they use the host's /usr).
  command -v ip >/dev/null 2>&1 || test -x /usr/sbin/ip || apt_install iproute2
  command -v nft >/dev/null 2>&1 || test -x /usr/sbin/nft || apt_install nftables
  command -v openssl >/dev/null 2>&1 || apt_install openssl
  command -v curl >/dev/null 2>&1 || apt_install curl
  runc --version | head -n 1 >&2
}

# The image store's test images (crates/runc/tests/images_umoci.rs): umoci makes an OCI image
# layout around Debian's static busybox, so no registry is needed.
ensure_image_tools() {
  command -v umoci >/dev/null 2>&1 || apt_install umoci
  test -x /bin/busybox || apt_install busybox-static
}

# The Debian image of the image tests (crates/runc/tests/runc_images_debian.rs) and the images
# benchmark: a minbase root filesystem tarball of this host's Debian release, made with mmdebstrap
# from the mirror the host's apt uses (about 170 MB, a minute or two), once: it is kept in the
# user's cache, outside any clone, and named in THREADBOX_TEST_DEBIAN_IMAGE.
ensure_debian_image() {
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/threadbox/test-images"
  local suite mirror image
  suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
  image="$cache/debian-$suite-minbase.tar"
  if [ ! -s "$image" ]; then
    apt_install mmdebstrap
    mirror="$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/\?$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
    [ -n "$mirror" ] || mirror="$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)"
    [ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
    say "building the Debian test image ($suite minbase from $mirror, once; kept in $cache)"
    mkdir -p "$cache"
    as_root mmdebstrap --quiet --variant=minbase --mode=root --format=tar "$suite" "$image.partial" \
      "deb $mirror $suite main" </dev/null
    mv "$image.partial" "$image"
  fi
  export THREADBOX_TEST_DEBIAN_IMAGE="$image"
}

# Headless Chromium and its WebDriver server, for the dashboard's browser test
# (cli/tests/dashboard_browser.rs). Debian's packages; the two always share a version.
ensure_chromium() {
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && return 0
  apt_install chromium chromium-driver
}

# fresh_venv DIR: an empty virtualenv at DIR, whatever was there before.
fresh_venv() {
  rm -rf "$1"
  if ! python3 -m venv "$1" >/dev/null 2>&1; then
    # Debian ships venv's bootstrap separately.
    rm -rf "$1"
    apt_install python3-venv
    python3 -m venv "$1"
  fi
}

# pip_install DIR SPEC...: pip's SPECs into the virtualenv at DIR. A download from PyPI fails
# now and then on a network hiccup, so it is tried three times; pip's output goes to
# DIR/pip-install.log, and its end is shown when the last try fails.
pip_install() {
  local venv=$1 attempt
  shift
  for attempt in 1 2 3; do
    if "$venv/bin/pip" install --disable-pip-version-check --progress-bar off "$@" \
      >"$venv/pip-install.log" 2>&1; then
      return 0
    fi
    [ "$attempt" = 3 ] && break
    say "pip could not install $* (try $attempt of 3); trying again"
    sleep $((attempt * 5))
  done
  echo "pip install $* failed three times; the end of its output ($venv/pip-install.log):" >&2
  tail -n 30 "$venv/pip-install.log" >&2
  return 1
}

# pinned_venv DIR CHECK SPEC: a virtualenv at DIR with pip's SPEC in it, kept while its python
# passes CHECK (a Python snippet that exits 0 when the pinned version is there), else made afresh.
pinned_venv() {
  "$1/bin/python" -c "$2" 2>/dev/null && return 0
  say "installing $3 into $1"
  fresh_venv "$1"
  pip_install "$1" "$3"
}

# moto's server stands in for DynamoDB and SQS in the tests. Pinned, installed from PyPI into a
# virtualenv under target/ (so `cargo clean` removes it), and reused while the version matches.
MOTO_VERSION="5.2.5"
MOTO_VENV="target/moto-venv"

ensure_moto() {
  pinned_venv "$MOTO_VENV" "import sys, moto; sys.exit(moto.__version__ != '$MOTO_VERSION')" \
    "moto[server]==$MOTO_VERSION"
}

# The official MCP Python SDK, pinned, in a virtualenv of its own: the client the `threadbox mcp`
# test drives the server with, as an agent host would.
MCP_SDK_VERSION="2.3.0"
MCP_VENV="target/mcp-venv"
ensure_mcp_sdk() {
  pinned_venv "$MCP_VENV" "import sys, importlib.metadata as m; sys.exit(m.version('mcp') != '$MCP_SDK_VERSION')" \
    "mcp==$MCP_SDK_VERSION"
}

# The official E2B SDKs, pinned: the clients the E2B-compatible API's tests drive `threadbox dev`
# with (cli/tests/e2b_sdk.rs), as code written for E2B would. Python from PyPI in a virtualenv,
# JavaScript from npm into node_modules under target/.
E2B_PY_SDK_VERSION="2.63.0"
E2B_PY_VENV="target/e2b-venv"
E2B_JS_SDK_VERSION="2.51.0"
E2B_JS_DIR="target/e2b-js"

ensure_e2b_sdks() {
  pinned_venv "$E2B_PY_VENV" "import sys, importlib.metadata as m; sys.exit(m.version('e2b') != '$E2B_PY_SDK_VERSION')" \
    "e2b==$E2B_PY_SDK_VERSION"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
  fi
  if [ "$(node -p "require('./$E2B_JS_DIR/node_modules/e2b/package.json').version" 2>/dev/null)" != "$E2B_JS_SDK_VERSION" ]; then
    say "installing e2b@$E2B_JS_SDK_VERSION into $E2B_JS_DIR"
    mkdir -p "$E2B_JS_DIR"
    npm install --silent --no-audit --no-fund --prefix "$E2B_JS_DIR" "e2b@$E2B_JS_SDK_VERSION"
  fi
}

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

MOTO_PID=""
# start_moto: run moto's server on a free loopback port, wait until it answers, and point the AWS
# SDK at it through its standard settings. The caller stops it with stop_moto (on EXIT).
start_moto() {
  local port log
  port="$(free_port)"
  log="target/moto-server.log"
  mkdir -p target
  "$MOTO_VENV/bin/python" scripts/moto_server.py 127.0.0.1 "$port" >"$log" 2>&1 &
  MOTO_PID=$!
  local url="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    if "$MOTO_VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('$url/moto-api/', timeout=1)" 2>/dev/null; then
      say "moto's server is up at $url (pid $MOTO_PID, log $log)"
      # Only the standard settings, as in production; clear any that would point elsewhere.
      unset AWS_ENDPOINT_URL_DYNAMODB AWS_ENDPOINT_URL_SQS AWS_PROFILE AWS_SESSION_TOKEN
      export AWS_ENDPOINT_URL="$url"
      export AWS_REGION="us-east-1"
      export AWS_ACCESS_KEY_ID="test"
      export AWS_SECRET_ACCESS_KEY="test"
      export THREADBOX_REQUIRE_AWS=1
      return 0
    fi
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
      say "moto's server exited; its log:"
      cat "$log" >&2
      return 1
    fi
    sleep 0.2
  done
  say "moto's server did not answer at $url within 20 s; its log:"
  cat "$log" >&2
  stop_moto
  return 1
}

stop_moto() {
  if [ -n "$MOTO_PID" ] && kill -0 "$MOTO_PID" 2>/dev/null; then
    kill "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
  MOTO_PID=""
}

# The Lambda tools, pinned, from PyPI into one virtualenv under target/: cargo-lambda (the local
# loop's `cargo lambda watch` and `invoke`; `sam build` runs its `build` through infra/Makefile,
# with the zig it brings) and aws-sam-cli (`sam validate --lint`, `sam build`, `sam deploy`). Only
# those commands (and zig) go on PATH, through target/lambda-tools/bin, so the virtualenv's python
# does not shadow the system's.
CARGO_LAMBDA_VERSION="1.9.2"
SAM_CLI_VERSION="1.170.0"
LAMBDA_VENV="target/lambda-venv"
LAMBDA_TOOLS_BIN="target/lambda-tools/bin"

ensure_lambda_tools() {
  if ! "$LAMBDA_VENV/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(m.version('cargo-lambda') != '$CARGO_LAMBDA_VERSION' or m.version('aws-sam-cli') != '$SAM_CLI_VERSION')
" 2>/dev/null; then
    say "installing cargo-lambda==$CARGO_LAMBDA_VERSION and aws-sam-cli==$SAM_CLI_VERSION into $LAMBDA_VENV (a few minutes, once)"
    fresh_venv "$LAMBDA_VENV"
    pip_install "$LAMBDA_VENV" "cargo-lambda==$CARGO_LAMBDA_VERSION" "aws-sam-cli==$SAM_CLI_VERSION"
    "$LAMBDA_VENV/bin/python" -c "import importlib.metadata as m; m.version('cargo-lambda'); m.version('aws-sam-cli')"
  fi
  mkdir -p "$LAMBDA_TOOLS_BIN"
  ln -sf "$PWD/$LAMBDA_VENV/bin/cargo-lambda" "$LAMBDA_TOOLS_BIN/cargo-lambda"
  ln -sf "$PWD/$LAMBDA_VENV/bin/sam" "$LAMBDA_TOOLS_BIN/sam"
  # cargo-lambda cross-compiles (`sam build`: arm64) with zig, which the ziglang package brings
  # but puts nowhere cargo-lambda looks: link it beside the two.
  ln -sf "$("$LAMBDA_VENV/bin/python" -c 'import os, ziglang; print(os.path.abspath(os.path.join(os.path.dirname(ziglang.__file__), "zig")))')" \
    "$LAMBDA_TOOLS_BIN/zig"
  export PATH="$PWD/$LAMBDA_TOOLS_BIN:$PATH"
  # SAM CLI would otherwise ask about telemetry and phone home on every command.
  export SAM_CLI_TELEMETRY=0
  echo "cargo-lambda $(cargo lambda --version 2>/dev/null | awk '{print $2}'), $(sam --version)" >&2
}
