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
  runc --version | head -n 1 >&2
}
