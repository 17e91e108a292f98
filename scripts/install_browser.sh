#!/usr/bin/env bash
# Install Debian's Chromium and ChromeDriver for the live web viewer test
# (tests/test_web_viewer.py). Idempotent; needs root (CI runs as root) or sudo.
#
#   bash scripts/install_browser.sh
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  echo "install_browser: chromium and chromedriver already installed"
  exit 0
fi
SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install_browser: need root (or sudo) to apt-get install chromium chromium-driver" >&2; exit 2; fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
echo "install_browser: $(chromium --version 2>/dev/null | head -1)"
