"""README command 1, the embedded default: SQLite, in-process wake-ups and scheduler, a
real local agent that joins, passes its checks and judges every python sample."""

import re
import shutil
import subprocess
import sys

import pytest

from tests.agents import private_dir
from tests.live import ROOT, free_port, operator_environment

pytestmark = pytest.mark.slow


@pytest.fixture
def state_dir():
    path = private_dir("kece-demo-", 0o711)  # the sandbox uid must traverse to the agent's workspace
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_demo_judges_every_python_sample_as_intended_on_sqlite(tmp_path, state_dir):
    env = operator_environment(DEBUG=1, DATABASE_URL=f"sqlite:///{tmp_path / 'kece.sqlite3'}",
                               KECE_ARTIFACT_ROOT=tmp_path / "artifacts", KECE_LOG_LEVEL="WARNING")
    run = subprocess.run([sys.executable, "manage.py", "demo", "--no-wait", "--pools", "python",
                          "--port", str(free_port()), "--state-dir", str(state_dir)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    submitted = int(re.search(r"submitted (\d+) sample solutions", output).group(1))
    judged = re.findall(r"^\[demo\] python .* → (\S+) .*$", output, flags=re.M)
    assert submitted >= 14 and len(judged) == submitted, output[-3000:]
    assert output.count("as intended") == submitted, output[-3000:]
    assert "self-check passed" in output and "node enabled" in output
    # The busy agent asked for its next job on its result posts, and got them.
    agent_log = (state_dir / "python" / "agent.log").read_text()
    assert re.search(r"\"result accepted\" .*next_jobs=1", agent_log), agent_log[-2000:]
