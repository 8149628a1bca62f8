"""`python -m kece.probe worker|beat`: exit 0 when this host's Celery worker (or beat) loop
has shown a sign of life recently, 1 otherwise — a container healthcheck.

The loops leave the sign themselves (`kece.celery`): the worker's timer touches a file
every few seconds, beat touches one on every tick of its scheduler. A stale file means the
loop is stuck (or the process gone) even if the process still runs. `celery inspect ping`
would tell the same through the broker, at the cost of a Celery client, a broker round trip
and a reply from every pool process, each time the healthcheck runs.
"""

import os
import socket
import sys
import time
from pathlib import Path

INTERVAL_S = {"worker": 5.0, "beat": 30.0}  # how often each loop touches its file, at most
STALE_AFTER_S = {kind: 6 * seconds for kind, seconds in INTERVAL_S.items()}


def heartbeat_file(kind: str) -> Path:
    from django.conf import settings

    # Per host name: containers that share a volume do not vouch for one another.
    return Path(settings.KECE_PROCESS_HEARTBEAT_DIR) / f"kece-{kind}-{socket.gethostname()}.alive"


def touch(kind: str) -> None:
    path = heartbeat_file(kind)
    try:
        path.touch()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def age(kind: str, now: float | None = None) -> float | None:
    try:
        return (time.time() if now is None else now) - heartbeat_file(kind).stat().st_mtime
    except FileNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in INTERVAL_S:
        print("usage: python -m kece.probe worker|beat", file=sys.stderr)
        return 2
    kind = argv[0]
    seconds = age(kind)
    if seconds is None:
        print(f"{kind}: no heartbeat yet ({heartbeat_file(kind)})", file=sys.stderr)
        return 1
    if seconds > STALE_AFTER_S[kind]:
        print(f"{kind}: last heartbeat {seconds:.0f} s ago (stale after {STALE_AFTER_S[kind]:.0f} s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kece.settings")  # read, not set up: no apps load
    sys.exit(main(sys.argv[1:]))
