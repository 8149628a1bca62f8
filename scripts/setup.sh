#!/usr/bin/env bash
# Installs what KECE needs on a fresh Debian machine: system packages (once), a virtualenv
# in .venv with the project and its test dependencies, and the TypeScript compiler the
# arkts stand-in runtime uses. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# chromium and the CJK fonts: the browser tests of the pages (English and Chinese); gettext:
# the translation catalogue's completeness test; nginx: the Compose proxy's configuration run
# for real in front of a live server (tests/deploy/test_proxy_live.py); faketime: a server
# whose clock is minutes off the database's (tests/judging/test_clock.py); iproute2, nftables,
# redis-sentinel, mariadb-server, openssl: the host lab (bench/lab/, tests/lab/test_lab.py).
for pkg in pkg-config libmariadb-dev bubblewrap chromium fonts-noto-cjk gettext faketime nginx \
    iproute2 nftables redis-server redis-sentinel mariadb-server openssl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing system packages: ${need_apt[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.kece-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing the project and its test dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi

# The arkts pool's default runtime spec type-checks with tsc and runs on Node.js.
if command -v npm >/dev/null 2>&1 && ! command -v tsc >/dev/null 2>&1; then
  echo "setup: installing the TypeScript compiler (arkts stand-in runtime)"
  npm install -g --silent typescript@5.9.3 >/dev/null 2>&1 || echo "setup: could not install typescript; the arkts pool will be unavailable"
fi
