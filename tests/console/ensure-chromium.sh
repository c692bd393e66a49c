#!/usr/bin/env bash
# Make Debian's chromium available for the console's browser tests, idempotently.
#
#   tests/console/ensure-chromium.sh     # prints one "chromium: ..." line; exit 0 when it runs
#
# Playwright drives this browser through executable_path (it never downloads one of its own).
# Already installed: nothing to do. Otherwise, as root with apt: Debian's `chromium` package.
set -euo pipefail
say() { echo "chromium: $*"; }
BROWSER="${FERRYMQ_CHROMIUM:-/usr/bin/chromium}"

if [ -x "$BROWSER" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "missing ($BROWSER) and not root with apt-get here: install Debian's chromium package"
  exit 1
fi
say "installing Debian's chromium (apt)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
"$BROWSER" --version
