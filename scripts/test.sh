#!/usr/bin/env bash
# Runs the whole test suite against MariaDB + Redis. Their absence is a failure, not a skip.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/judging -x).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/services.sh

export DATABASE_URL="${KECE_TEST_DATABASE_URL:-mysql://root:@127.0.0.1:3306/kece}"
export REDIS_URL="${KECE_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
export KECE_REQUIRE_SERVICES=1
export KECE_LOG_LEVEL="${KECE_LOG_LEVEL:-WARNING}"

set +e
.venv/bin/python -m pytest --create-db -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test: pytest collected no tests — that is a failure" >&2
  exit 1
fi
exit "$status"
