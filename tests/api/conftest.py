import pytest

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
