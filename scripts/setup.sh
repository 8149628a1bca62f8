#!/usr/bin/env bash
# Installs what KECE needs on a fresh Debian machine: system packages (once), a virtualenv
# in .venv with the project and its test dependencies, and the TypeScript compiler the
# arkts stand-in runtime uses. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# bubblewrap and libseccomp2: the agents' sandbox and its system call filter;
# chromium and the CJK fonts: the browser tests of the pages (English and Chinese); gettext:
# the translation catalogue's completeness test; nginx: the Compose proxy's configuration run
# for real in front of a live server (tests/deploy/test_proxy_live.py); faketime: a server
# whose clock is minutes off the database's (tests/judging/test_clock.py); systemd:
# systemd-analyze, which verifies the judge hosts' agent unit (tests/deploy/test_systemd.py);
# mariadb-server-core and mariadb-client-core: mariadbd and mariadb-install-db (which runs
# my_print_defaults) without a service, for a MariaDB server of a test's own that it really
# stops (tests/test_health.py) and for the host lab's database host; iproute2, nftables,
# redis-server, redis-sentinel, openssl: the host lab (bench/lab/, tests/lab/test_lab.py).
for pkg in pkg-config libmariadb-dev bubblewrap libseccomp2 chromium fonts-noto-cjk gettext faketime nginx systemd \
    mariadb-server-core mariadb-client-core iproute2 nftables redis-server redis-sentinel openssl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing system packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  # Debian starts a package's service on install: the tests run nginx and Sentinel processes
  # of their own, on loopback ports, for their length only; none is wanted running here.
  for service in nginx redis-sentinel; do
    case " ${need_apt[*]} " in *" $service "*) ;; *) continue ;; esac
    if [ -d /run/systemd/system ]; then
      $SUDO systemctl disable --now "$service.service" >/dev/null 2>&1 || true
    elif [ -x "/etc/init.d/$service" ]; then
      $SUDO "/etc/init.d/$service" stop >/dev/null 2>&1 || true
      $SUDO update-rc.d "$service" disable >/dev/null 2>&1 || true
    fi
  done
fi

# promtool checks and unit-tests the alert rules (tests/deploy/test_prometheus.py), and the
# server scrapes a live KECE in a test (tests/ops/test_metrics.py, on loopback, for the
# test's length only); Debian ships both in the prometheus package, whose service (and node
# exporter) this machine does not want running.
if ! dpkg -s prometheus >/dev/null 2>&1; then
  echo "setup: installing prometheus (promtool, and the server for the scrape test)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/prometheus ]; then
    $SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    $SUDO update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
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
