#!/bin/sh
# Writes a node's one-time join code into its agent's credential volume (mode 0600). An
# agent without a credential waits for this file and starts as soon as it appears; it then
# exchanges the code for the node's credential and replaces the file with it. To re-join a
# node that already has a credential (rotate, re-register), write the new code and
# `docker compose restart agent-POOL`.
#
# Usage: ./set-join-code.sh POOL [JOIN_CODE]
#   POOL       cpp | java | python | mysql | arkts  (the service agent-POOL)
#   JOIN_CODE  the code the admin API answered with; read from standard input if omitted
set -eu
cd "$(dirname "$0")"

pool=${1:-}
case "$pool" in
    cpp|java|python|mysql|arkts) ;;
    *) echo "usage: $0 cpp|java|python|mysql|arkts [JOIN_CODE]" >&2; exit 2 ;;
esac
if [ $# -ge 2 ]; then
    code=$2
else
    printf 'join code for agent-%s: ' "$pool" >&2
    read -r code
fi
code=$(printf '%s' "$code" | tr -d '[:space:]')
if [ -z "$code" ]; then
    echo "set-join-code: empty join code" >&2
    exit 2
fi

# A throw-away container of the agent's own image, with its volumes and nothing started
# beside it; the code travels on standard input, never on a command line.
printf '%s\n' "$code" | docker compose run --rm -T --no-deps --entrypoint /bin/sh "agent-$pool" -c \
    'umask 077 && f="$JUDGE_CREDENTIAL_FILE" && cat > "$f.tmp" && mv "$f.tmp" "$f" && echo "written to $f"'
