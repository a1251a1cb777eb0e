#!/usr/bin/env bash
# Install Debian's Chromium (and ChromeDriver) for the UI tests (tests/ui, marker `ui`) when it is missing.
#
# Idempotent: does nothing when $CHROMIUM (default /usr/bin/chromium) is already there. Prints the path
# of the browser on stdout as its last line, so a caller can do  CHROMIUM="$(bash scripts/install_chromium.sh)".
# Needs root (or sudo) and Debian's package mirrors; no other network.
#
#   bash scripts/install_chromium.sh
set -euo pipefail
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$CHROMIUM" ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || { echo "install_chromium: need root or sudo to apt-get install chromium" >&2; exit 1; }
        SUDO="sudo"
    fi
    # Another apt run on the machine holds the dpkg lock for a while: wait for it instead of failing.
    APT=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
    echo "install_chromium: $CHROMIUM missing; installing Debian chromium + chromium-driver" >&2
    $SUDO apt-get "${APT[@]}" update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${APT[@]}" install -y -qq --no-install-recommends \
        chromium chromium-driver fonts-liberation >&2
fi

[ -x "$CHROMIUM" ] || { echo "install_chromium: $CHROMIUM still missing after apt-get install" >&2; exit 1; }
"$CHROMIUM" --version >&2 || true
echo "$CHROMIUM"
