"""Starting the agent: configuration errors, sandbox requirements, exit codes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from .conftest import REPO, SUM_CASES, need_pool, verdict_of


@pytest.fixture
def base_env(tmp_path):
    cred = tmp_path / "credential"
    cred.write_text("jc_something\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
    env.update({
        "PYTHONPATH": str(REPO), "JUDGE_MODE": "pool", "JUDGE_POOL": "python",
        "JUDGE_CONTROL_URL": "http://127.0.0.1:9", "JUDGE_CREDENTIAL_FILE": str(cred),
        "JUDGE_WORKSPACE": str(tmp_path / "ws"), "JUDGE_HEALTH_LISTEN": "off",
    })
    return env


def run_agent(env: dict, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node_agent"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("change, message", [
    ({"JUDGE_MODE": ""}, "JUDGE_MODE must be 'pool'"),
    ({"JUDGE_POOL": "rust"}, "JUDGE_POOL must be one of"),
    ({"JUDGE_CONTROL_URL": "http://192.0.2.10"}, "plain http:// only for a loopback"),
    ({"JUDGE_CONTROL_URL": "https://kece.internal/api"}, "origin only"),
    ({"JUDGE_CONTROL_URL": "ftp://kece.internal"}, "JUDGE_CONTROL_URL must be https"),
    ({"JUDGE_CREDENTIAL_FILE": "/nonexistent/credential"}, "does not exist"),
    ({"JUDGE_LOCAL_SLOTS": "many"}, "JUDGE_LOCAL_SLOTS must be an integer"),
    ({"JUDGE_LOCAL_SLOTS": "0"}, "JUDGE_LOCAL_SLOTS must be between"),
    ({"JUDGE_HEALTH_LISTEN": None}, "JUDGE_HEALTH_LISTEN is required"),
    ({"JUDGE_HEALTH_LISTEN": "127.0.0.1:8443"}, "JUDGE_TLS_CERT and JUDGE_TLS_KEY are required"),
    ({"JUDGE_HEALTH_LISTEN": "nonsense"}, "must be host:port"),
    ({"JUDGE_POOL": "mysql"}, "JUDGE_MYSQL_URL is required"),
    ({"JUDGE_RUNTIME_SPEC": "python-r9"}, "runtime spec 'python-r9' is unknown"),
    ({"JUDGE_RUNTIME_SPEC": "cpp-r1"}, "belongs to pool 'cpp'"),
    ({"JUDGE_CA_FILE": "/nonexistent/ca.pem"}, "JUDGE_CA_FILE"),
    ({"JUDGE_ALLOW_WEAK_SANDBOX": "maybe"}, "JUDGE_ALLOW_WEAK_SANDBOX must be 1 or 0"),
])
def test_bad_configuration_is_one_clear_line_and_exit_code_2(base_env, change, message):
    for key, value in change.items():
        if value is None:
            base_env.pop(key)
        else:
            base_env[key] = value
    result = run_agent(base_env)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_broken_runtime_spec_file_is_a_configuration_error(base_env, tmp_path):
    spec = tmp_path / "specs.json"
    spec.write_text('{"python-r1": {"run": "python3 main.py"}}')
    base_env["JUDGE_RUNTIME_SPEC_FILE"] = str(spec)
    result = run_agent(base_env)
    assert result.returncode == 2 and "run must be a list of strings" in result.stderr


def test_more_slots_than_cpus_is_a_warning_at_start(base_env):
    cpus = len(os.sched_getaffinity(0))
    base_env["JUDGE_BWRAP"] = "/nonexistent/bwrap"  # stop right after the start-up warnings
    base_env["JUDGE_LOCAL_SLOTS"] = str(cpus + 1)
    assert "more slots than CPUs" in run_agent(base_env).stderr
    base_env["JUDGE_LOCAL_SLOTS"] = str(cpus)
    assert "more slots than CPUs" not in run_agent(base_env).stderr


def test_an_agent_not_running_as_root_warns_that_user_code_can_write_what_it_owns(base_env):
    base_env["JUDGE_BWRAP"] = "/nonexistent/bwrap"  # stop right after the start-up warnings
    as_another_user = ("import os, runpy; os.geteuid = lambda: 1000; "
                       "runpy.run_module('node_agent', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", as_another_user], cwd=REPO, env=base_env, capture_output=True,
                            text=True, timeout=30)
    assert "not running as root: user code runs as the agent's own user" in result.stderr
    assert "not running as root" not in run_agent(base_env).stderr  # as root: runs as JUDGE_SANDBOX_UID


def test_without_bubblewrap_it_refuses_to_start_unless_weak_mode_is_allowed(base_env, tmp_path):
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    base_env["PATH"] = str(no_bwrap)  # no bwrap installed, none named
    result = run_agent(base_env)
    assert result.returncode == 3
    assert "bubblewrap (bwrap) was not found" in result.stderr and "JUDGE_ALLOW_WEAK_SANDBOX" in result.stderr


@pytest.mark.parametrize("weak", ["0", "1"])
def test_a_named_bubblewrap_that_is_not_there_stops_the_agent_even_in_weak_mode(base_env, weak):
    # A typo in the path must not leave user code in the rlimit-only sandbox.
    base_env.update({"JUDGE_BWRAP": "/usr/bin/bwarp", "JUDGE_ALLOW_WEAK_SANDBOX": weak})
    result = run_agent(base_env)
    assert result.returncode == 3
    assert "JUDGE_BWRAP names '/usr/bin/bwarp', which is not an executable here" in result.stderr
    assert "WEAK SANDBOX" not in result.stderr


def test_weak_mode_says_so_loudly_still_judges_and_tells_the_server(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python", env={"JUDGE_BWRAP": "off", "JUDGE_ALLOW_WEAK_SANDBOX": "1"})
    job = plane.add_job(pool="python", source="a, b = map(int, input().split())\nprint(a + b)\n", cases=SUM_CASES)
    assert verdict_of(plane, job)["verdict"] == "AC"
    assert agent.logs().count("WEAK SANDBOX") >= 1
    health = plane.nodes[agent.node_id].heartbeats[-1]["health"]
    assert health["ok"] is True and health["checks"]["sandbox_isolated"] is False
    assert health["checks"]["memory_cgroup"] is False

    diagnostic = verdict_of(plane, plane.add_job(pool="python", source=None, kind="DIAGNOSTIC",
                                                 node_id=agent.node_id), timeout=60)
    isolation = next(c for c in diagnostic["checks"] if c["name"] == "sandbox_isolated")
    assert not isolation["ok"] and isolation["detail"].startswith("WEAK")
    assert diagnostic["verdict"] == "WA", "the self-check of a weak node does not pass on the node's word"


def test_a_bubblewrap_that_is_there_but_fails_stops_the_agent_even_in_weak_mode(base_env, tmp_path, workdir):
    need_pool("python")
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    broken.chmod(0o755)
    base_env.update({"JUDGE_BWRAP": str(broken), "JUDGE_ALLOW_WEAK_SANDBOX": "1",
                     "JUDGE_WORKSPACE": str(workdir / "ws")})
    result = run_agent(base_env)
    assert result.returncode == 3
    assert "bubblewrap does not work here" in result.stderr and "Permission denied" in result.stderr
    assert "WEAK SANDBOX" not in result.stderr


def test_the_heartbeat_says_whether_runs_get_a_memory_cgroup(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python", slots=1)
    checks = plane.nodes[agent.node_id].heartbeats[-1]["health"]["checks"]
    assert checks["sandbox_isolated"] is True
    # Whichever this host allows, the agent says it, with its reason, and does not pretend.
    said = "memory cgroup per run" if checks["memory_cgroup"] else "no memory cgroup for runs"
    assert said in agent.logs()
