"""The join throttle under the real server: the address it counts is the one uvicorn settled
on, and uvicorn takes a forwarded one only from the addresses `--forwarded-allow-ips` names
(deploy/compose: the proxy's own network). A client that reaches the server another way
cannot rotate X-Forwarded-For to try join codes without end."""

import pytest
import requests

from tests.live import LiveServer

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]

JOIN = "/api/v1/internal/judgers/join"
BODY = {"joinCode": "no-such-code-0000000000000", "agentVersion": "1", "runtimeSpec": "python-r1", "localSlots": 1}
# A network this test never reaches: the proxy's, as the compose file names its own.
PROXY_NETWORK = "192.0.2.0/24"


def _answers(trusted: str, tmp_path) -> list[int]:
    # No Redis: the throttle counts in this server's own memory, apart from other tests. No
    # scheduler either: its periodic work would write to the database the other tests read.
    env = {"KECE_JOIN_THROTTLE": "3/min", "KECE_NUM_PROXIES": "0", "REDIS_URL": "", "KECE_IN_PROCESS_SCHEDULER": 0}
    args = ["--proxy-headers", f"--forwarded-allow-ips={trusted}"]
    with LiveServer(env=env, args=args, log_path=tmp_path / f"server-{trusted.replace('/', '_')}.log") as server:
        with requests.Session() as http:
            return [http.post(server.url + JOIN, json=BODY, headers={"X-Forwarded-For": f"203.0.113.{i}"},
                              timeout=10).status_code for i in range(4)]


def test_a_client_outside_the_proxys_network_is_counted_at_its_own_address(tmp_path):
    assert _answers(PROXY_NETWORK, tmp_path) == [401, 401, 401, 429]


def test_behind_the_proxy_each_forwarded_address_is_counted_apart(tmp_path):
    # The same requests from an address the server trusts as its proxy: each forwarded
    # address is a client of its own, none of them over the limit.
    assert _answers("127.0.0.1", tmp_path) == [401, 401, 401, 401]
