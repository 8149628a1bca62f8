import socket
import subprocess
import sys
import time

import requests

from tests.live import ROOT, operator_environment


def _server(env):
    """uvicorn on a socket bound here and handed over: what answers on its port is this process."""
    with socket.socket() as listener:
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as tests.live.LiveServer
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        process = subprocess.Popen([sys.executable, "-m", "uvicorn", "kece.asgi:application",
                                    "--fd", str(listener.fileno())], pass_fds=(listener.fileno(),),
                                   cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return process, listener.getsockname()[1]


def test_a_second_server_process_on_the_same_sqlite_database_refuses_to_start(tmp_path):
    env = operator_environment(DEBUG=1, DATABASE_URL=f"sqlite:///{tmp_path / 'kece.sqlite3'}",
                               KECE_ARTIFACT_ROOT=tmp_path / "artifacts")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    first, first_port = _server(env)
    try:
        for _ in range(100):
            try:
                requests.get(f"http://127.0.0.1:{first_port}/api/v1/system/judgers/summary", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        second, _ = _server(env)
        output, _ = second.communicate(timeout=60)
        assert second.returncode != 0
        assert b"single server process" in output
        assert requests.get(f"http://127.0.0.1:{first_port}/api/v1/system/judgers/summary", timeout=5).ok
    finally:
        first.terminate()
        first.wait(10)
