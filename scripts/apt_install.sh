#!/usr/bin/env bash
# Install the Debian packages named that are missing, idempotently (the setup scripts and `make test` use it: CI
# starts from a fresh machine and installs everything itself).
#
#   scripts/apt_install.sh <who> PACKAGE...
#
# <who> prefixes every line it prints ("[<who>] apt: ..."). Already installed: one line, nothing else. Missing and
# not root: exits 1 naming the `sudo apt-get install` to run. Not a Debian system: says so and exits 0 (the caller's
# own checks then say what is missing). A failed install is retried once after `apt-get update`.
set -euo pipefail

[[ $# -ge 2 ]] || {
    echo "usage: scripts/apt_install.sh <who> PACKAGE..." >&2
    exit 2
}
WHO="$1"
shift
say() { printf '[%s] apt: %s\n' "$WHO" "$*"; }
die() {
    printf '[%s] apt: ERROR: %s\n' "$WHO" "$*" >&2
    exit 1
}

if ! command -v dpkg-query >/dev/null 2>&1; then
    say "not a Debian system; install these yourself: $*"
    exit 0
fi
missing=()
for pkg in "$@"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null)" != "ii " ]]; then
        missing+=("$pkg")
    fi
done
if [[ ${#missing[@]} == 0 ]]; then
    say "$* already installed"
    exit 0
fi
[[ $(id -u) == 0 ]] || die "packages missing: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# another install of the same `make` (built in parallel) may hold dpkg's lock: wait for it instead of failing
LOCK_WAIT=(-o DPkg::Lock::Timeout=600)
say "installing ${missing[*]}"
if ! apt-get "${LOCK_WAIT[@]}" install -y --no-install-recommends "${missing[@]}"; then
    say "install failed; refreshing package lists and retrying"
    apt-get "${LOCK_WAIT[@]}" update || die "apt-get update failed"
    apt-get "${LOCK_WAIT[@]}" install -y --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]} failed"
fi
