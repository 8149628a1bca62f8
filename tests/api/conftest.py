import pytest

from tests.judging.helpers import claim, submit
from tests.live import LiveServer


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """One uvicorn for the module, against the test database."""
    from tests.conftest import ON_MARIADB

    if not ON_MARIADB:
        pytest.skip("live-server tests need MariaDB/MySQL")
    log = tmp_path_factory.mktemp("server") / "server.log"
    with LiveServer(env={"KECE_CLAIM_FALLBACK_MS": 1000}, log_path=log) as live:
        yield live


@pytest.fixture
def leased(student, problem, node_a):
    """(node, job): a submission of `student`'s leased to node A."""
    node, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    return node, job
