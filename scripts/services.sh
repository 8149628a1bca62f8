#!/usr/bin/env bash
# Makes sure MariaDB (127.0.0.1:3306) and Redis (127.0.0.1:6379) answer, starting them when
# they are installed but down. Exits non-zero when either cannot be reached.
set -uo pipefail

mariadb_up() { mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! mariadb_up && command -v mariadbd >/dev/null 2>&1; then
  echo "services: starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec "$(command -v mariadbd)" >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do mariadb_up && break; sleep 0.5; done
fi
if ! redis_up && command -v redis-server >/dev/null 2>&1; then
  echo "services: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 1 40); do redis_up && break; sleep 0.25; done
fi

ok=0
mariadb_up || { echo "services: MariaDB is not reachable on 127.0.0.1:3306" >&2; ok=1; }
redis_up || { echo "services: Redis is not reachable on 127.0.0.1:6379" >&2; ok=1; }
exit $ok
