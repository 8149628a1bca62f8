#!/usr/bin/env bash
# The embedded demo: SQLite, in-process wake-ups and scheduler, one local agent per pool
# this machine can run. Arguments go to `manage.py demo` (e.g. --pools python,cpp --port 8000).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
unset DATABASE_URL REDIS_URL
export DEBUG=1
exec .venv/bin/python manage.py demo "$@"
