"""pytest plugin for `bench/mutation.py`: mutmut runs pytest several times in one process,
and forks each mutant's run from it. What one run leaves in process memory must not reach
the next:

- pytest-django with `--reuse-db` leaves the connection settings pointing at the test
  database, so the next run would prefix it again (`test_test_…`) while the database pool
  threads stay connected to the first one;
- the node-auth and job-meta caches would answer for credentials and job ids that the next
  run's fresh test data reuses;
- the row shapes (`kece.rows`), built once per model, would hide a mutant of the code that
  builds them;
- the lanes' threads keep the last run's database connections.
"""

import pytest

_database_names: dict[str, str] = {}


def pytest_sessionstart(session):
    from django.db import connections

    from judging.auth import auth_cache
    from judging.services import job_meta
    from kece import lanes, rows

    for alias in connections:
        settings_dict = connections[alias].settings_dict
        _database_names.setdefault(alias, settings_dict["NAME"])
        settings_dict["NAME"] = _database_names[alias]
    connections.close_all()
    for lane in (lanes.NODE, lanes.USER, lanes.ADMIN):  # their threads keep the last run's connections
        lane.stop()
    auth_cache.drop_where(lambda _: True)
    job_meta.forget_all()
    rows._shapes.clear()


def pytest_collection_modifyitems(config, items):
    """Only the test modules that cover the module under mutation (`bench/mutation.py`)."""
    import os

    wanted = tuple(t for t in os.environ.get("KECE_MUTATION_TESTS", "").split(",") if t)
    if not wanted:
        return
    keep = [item for item in items if item.nodeid.startswith(wanted)]
    deselected = [item for item in items if not item.nodeid.startswith(wanted)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


@pytest.fixture(scope="session", autouse=True)
def _no_rows_left_by_a_killed_run(django_db_setup, django_db_blocker):
    """A mutant whose run was stopped mid-test (its time limit) leaves the rows a
    `transaction=True` test had committed: clear them before the next run counts rows."""
    from django.core.management import call_command

    from judging.models import JudgeJob, SettlementEvent
    from nodes.models import JudgeNode

    with django_db_blocker.unblock():
        if JudgeJob.objects.exists() or SettlementEvent.objects.exists() or JudgeNode.objects.exists():
            call_command("flush", interactive=False, verbosity=0)
