"""Settings of a test run: the product's own, read from an environment set here first.

The values go into os.environ, not only into these settings, so that the servers the tests
start as subprocesses (tests/live.py) read the same. Nothing in kece/settings.py knows it is
being tested.
"""

import atexit
import os
import shutil
import tempfile

TEST_ENVIRONMENT = {
    "SECRET_KEY": "kece-tests-only-secret-key",
    "ALLOWED_HOSTS": "localhost,127.0.0.1,[::1]",
    "KECE_LOCK_ORDER_CHECK": "1",
    # The production default and the test run's agents, which listen on loopback.
    "KECE_PROBE_ALLOWED_NETWORKS": "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7,127.0.0.0/8",
    # Hidden canaries and cross-checks are drawn at random: off, so that every other test's
    # jobs and statement counts are exactly its own. Their tests turn them on.
    "KECE_CANARY_RATE": "0",
    "KECE_CANARY_MIN_INTERVAL_S": "0",
    "KECE_CROSS_CHECK_RATE": "0",
}
for _name, _value in TEST_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

if "KECE_METRICS_DIR" not in os.environ:
    # This run's metrics files, never the checkout's var/metrics: made by the process that
    # starts the run (its subprocesses that read these settings share it), removed when it
    # ends. A server a test starts has a folder of its own (`tests.live`).
    os.environ["KECE_METRICS_DIR"] = tempfile.mkdtemp(prefix="kece-metrics-")
    atexit.register(shutil.rmtree, os.environ["KECE_METRICS_DIR"], ignore_errors=True)

from kece.settings import *  # noqa: E402,F401,F403
