#!/usr/bin/env bash
# Find PostgreSQL and Redis on 127.0.0.1, starting them when they are installed but down.
# With CI=true a service that cannot be reached is an error; otherwise the tests that need it
# are skipped (they say so).
set -uo pipefail
PG_HOST=127.0.0.1 PG_PORT=${RECYCLE_TEST_PG_PORT:-5432}
REDIS_PORT=${RECYCLE_TEST_REDIS_PORT:-6379}

postgres_up() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" 2>/dev/null || (exec 3<>"/dev/tcp/$PG_HOST/$PG_PORT") 2>/dev/null; }
redis_up() { [ "$( (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" && printf 'PING\r\n' >&3 && head -c 5 <&3) 2>/dev/null)" = "+PONG" ]; }

if ! postgres_up && command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  for _ in $(seq 1 30); do postgres_up && break; sleep 1; done
fi
if ! redis_up && command -v redis-server >/dev/null 2>&1; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no || true
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
fi

missing=()
postgres_up || missing+=("PostgreSQL on $PG_HOST:$PG_PORT")
redis_up || missing+=("Redis on 127.0.0.1:$REDIS_PORT")
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "ERROR: required services are not reachable: ${missing[*]}" >&2
    exit 1
  fi
  echo "WARNING: not reachable, their tests will be skipped: ${missing[*]}" >&2
fi
exit 0
