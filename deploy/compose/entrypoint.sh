#!/bin/sh
# Entry point of the KECE images (server and agent).
#
# A few settings are connection URLs that carry a password, and the programs read them from
# the environment only. For each NAME below, NAME_FILE may name a file (a Compose secret)
# that holds the value instead, so the password never shows in `docker inspect`:
#
#   DATABASE_URL_FILE     -> DATABASE_URL     (control plane: its MySQL)
#   REDIS_URL_FILE        -> REDIS_URL        (control plane: Redis, if it has a password)
#   JUDGE_MYSQL_URL_FILE  -> JUDGE_MYSQL_URL  (mysql-pool agent: the judge MySQL)
#
# SECRET_KEY_FILE needs no help here: the server reads it itself.
#
# It also holds a judge node agent back until its join code is in place (below).
set -eu

for name in DATABASE_URL REDIS_URL JUDGE_MYSQL_URL; do
    eval "file=\${${name}_FILE:-}"
    [ -n "$file" ] || continue
    eval "direct=\${${name}:-}"
    if [ -n "$direct" ]; then
        echo "kece-entrypoint: set ${name} or ${name}_FILE, not both" >&2
        exit 2
    fi
    if [ ! -r "$file" ]; then
        echo "kece-entrypoint: ${name}_FILE=${file} is not a readable file" >&2
        exit 2
    fi
    value=$(cat "$file")
    if [ -z "$value" ]; then
        echo "kece-entrypoint: ${name}_FILE=${file} is empty" >&2
        exit 2
    fi
    export "${name}=${value}"
    unset "${name}_FILE"
done

# A judge node agent's credential file holds, at its first start, the join code the
# operator writes there after registering the node. Until it is there the agent waits
# rather than exiting: the container stays up, so its name already resolves when the node
# is registered under it, and it starts the moment the code arrives.
if [ "$#" -ge 3 ] && [ "$2" = "-m" ] && [ "$3" = "node_agent" ] && [ -n "${JUDGE_CREDENTIAL_FILE:-}" ] \
        && [ ! -s "$JUDGE_CREDENTIAL_FILE" ]; then
    echo "kece-entrypoint: waiting for the join code in ${JUDGE_CREDENTIAL_FILE}" >&2
    while [ ! -s "$JUDGE_CREDENTIAL_FILE" ]; do
        sleep 2
    done
    echo "kece-entrypoint: join code found; starting the agent" >&2
fi

exec "$@"
