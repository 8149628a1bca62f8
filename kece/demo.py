"""The embedded demo: one command that shows KECE judging real submissions.

It runs the control plane (uvicorn through `kece.serve`, SQLite, in-process wake-ups and scheduler) and one
local node agent per pool whose toolchain this machine has, registers and verifies the
nodes through the admin API exactly as an operator would (register → join code → agent
joins → connectivity + self-check → enable), then submits every sample solution through
the user API and prints each verdict as it arrives. Everything it starts stops on Ctrl-C.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
EXTENSIONS = {"cpp": "cpp", "java": "java", "python": "py", "arkts": "ts", "mysql": "sql"}
TOOLCHAINS = {"cpp": ["g++"], "java": ["javac", "java"], "python": ["python3"], "arkts": ["tsc", "node"]}
HEALTH_PORTS = {"cpp": 9441, "java": 9442, "python": 9443, "mysql": 9444, "arkts": 9445}


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        # As a server binds it: a port a stopped agent left in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def health_ports() -> dict[str, int]:
    """Each agent's health port: the usual one, or, taken (another demo runs), one the
    system gives: an agent that cannot listen exits, and the demo would wait for it."""
    ports = {}
    for pool, port in HEALTH_PORTS.items():
        if not _port_free(port):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        ports[pool] = port
    return ports


def sample_solutions(pools):
    """Every sample solution in `pools`' languages: (package folder, slug, language, file,
    the verdict it was written for: its name up to the first dot)."""
    for package in sorted(p for p in SAMPLES.iterdir() if (p / "problem.json").is_file()):
        spec = json.loads((package / "problem.json").read_text())
        for language in spec["languages"]:
            if language in pools:
                for source in sorted((package / "solutions").glob(f"*.{EXTENSIONS[language]}")):
                    yield package, spec["slug"], language, source, source.name.split(".")[0].upper()


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return lines[-1][:400] if lines else "(an empty log)"


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


class Demo:
    def __init__(self, *, port: int, state_dir: Path, judge_mysql_url: str, pools: list[str] | None):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.state = state_dir
        self.judge_mysql_url = judge_mysql_url
        self.wanted_pools = pools
        self.processes: list[subprocess.Popen] = []
        self.agents: dict[str, subprocess.Popen] = {}
        self.health_ports = health_ports()
        self.admin = requests.Session()
        self.student = requests.Session()

    # --- set-up ------------------------------------------------------------------------------

    def available_pools(self) -> list[str]:
        pools = []
        for pool in ("cpp", "java", "python", "arkts", "mysql"):
            if self.wanted_pools and pool not in self.wanted_pools:
                continue
            if pool == "mysql":
                if self._judge_mysql_reachable():
                    pools.append(pool)
                else:
                    say("mysql pool skipped: no judge MySQL/MariaDB at " + self.judge_mysql_url)
                continue
            missing = [tool for tool in TOOLCHAINS[pool] if not shutil.which(tool)]
            if missing:
                say(f"{pool} pool skipped: {', '.join(missing)} not found on PATH")
            else:
                pools.append(pool)
        return pools

    def _judge_mysql_reachable(self) -> bool:
        try:
            import MySQLdb
            from urllib.parse import urlsplit

            url = urlsplit(self.judge_mysql_url)
            MySQLdb.connect(host=url.hostname or "127.0.0.1", port=url.port or 3306, user=url.username or "root",
                            passwd=url.password or "", connect_timeout=2).close()
            return True
        except Exception:
            return False

    def prepare_database(self) -> tuple[str, str]:
        """Migrate, import the samples, and make the demo's admin and student."""
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Permission
        from django.core.management import call_command
        from rest_framework.authtoken.models import Token

        from judging.models import Problem
        from judging.services.problems import problem_import

        call_command("migrate", verbosity=0)
        for package in sorted(p for p in SAMPLES.iterdir() if (p / "problem.json").is_file()):
            slug = json.loads((package / "problem.json").read_text())["slug"]
            if not Problem.objects.filter(slug=slug).exists():
                problem, manifest = problem_import(package)
                say(f"imported sample problem {slug} (problem {problem.pk}, manifest {manifest.pk})")
        users = get_user_model()
        admin, _ = users.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
        password = secrets.token_urlsafe(9)
        admin.set_password(password)
        admin.is_staff = admin.is_superuser = True
        admin.save()
        admin.user_permissions.add(Permission.objects.get(codename="manage_judgers"))
        student, _ = users.objects.get_or_create(username="student")
        student.set_password(password)
        student.save()
        admin_token, _ = Token.objects.get_or_create(user=admin)
        student_token, _ = Token.objects.get_or_create(user=student)
        self.admin.headers["Authorization"] = f"Token {admin_token.key}"
        self.student.headers["Authorization"] = f"Token {student_token.key}"
        self.password = password
        return admin_token.key, student_token.key

    def make_certificates(self) -> dict:
        """A private CA for the agents' health endpoints, trusted by the control plane."""
        import trustme

        tls = self.state / "tls"
        tls.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        paths = {"ca": tls / "ca.pem", "cert": tls / "node.pem", "key": tls / "node.key"}
        ca.cert_pem.write_to_path(str(paths["ca"]))
        leaf.cert_chain_pems[0].write_to_path(str(paths["cert"]))
        for extra in leaf.cert_chain_pems[1:]:
            extra.write_to_path(str(paths["cert"]), append=True)
        leaf.private_key_pem.write_to_path(str(paths["key"]))
        os.chmod(paths["key"], 0o600)
        return paths

    # --- processes -----------------------------------------------------------------------------

    def start_server(self, tls: dict) -> None:
        # The demo sends every sample solution as one student within seconds, as no student
        # would: fair use's per-user limits are off unless the environment sets them.
        env = {"KECE_USER_ACTIVE_MAX": "0", "KECE_USER_SUBMIT_RATE": "0", **os.environ, "DEBUG": "1",
               "KECE_PROBE_ALLOWED_PORTS": ",".join(str(port) for port in self.health_ports.values()),
               "KECE_PROBE_CA_FILE": str(tls["ca"])}
        log = open(self.state / "server.log", "ab")
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "kece.serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--no-access-log"], cwd=ROOT, env=env, stdout=log, stderr=log,
            start_new_session=True))
        for _ in range(150):
            try:
                requests.get(self.base + "/api/v1/system/judgers/summary", timeout=1)
                say(f"control plane is up at {self.base} (log: {self.state / 'server.log'})")
                return
            except requests.RequestException:
                time.sleep(0.2)
        raise SystemExit("[demo] the control plane did not start; see " + str(self.state / "server.log"))

    def register_node(self, pool: str, host_group_id: int) -> dict:
        name = f"local-{pool}"
        nodes = self.admin.get(self.base + "/api/v1/admin/judgers", params={"pool": pool}).json()["results"]
        existing = next((n for n in nodes if n["name"] == name), None)
        if existing is None:
            response = self.admin.post(self.base + "/api/v1/admin/judgers", json={
                "name": name, "pool": pool, "baseUrl": f"https://127.0.0.1:{self.health_ports[pool]}",
                "hostGroupId": host_group_id, "maxSlots": 2})
            response.raise_for_status()
            node = response.json()
            say(f"registered node {name} (id {node['id']}); one-time join code issued")
        else:
            node = existing
        credential_file = self.state / pool / "credential"
        credential_file.parent.mkdir(parents=True, exist_ok=True)
        if existing is None or not credential_file.exists():
            code = node.get("joinCode") or self.admin.post(
                self.base + f"/api/v1/admin/judgers/{node['id']}/join-code").json()["joinCode"]
            credential_file.write_text(code + "\n")
            os.chmod(credential_file, 0o600)
        return node

    def start_agent(self, pool: str, tls: dict, weak_sandbox: bool) -> None:
        workspace = self.state / pool / "workspace"
        workspace.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JUDGE_MODE": "pool", "JUDGE_POOL": pool, "JUDGE_CONTROL_URL": self.base,
               "JUDGE_CREDENTIAL_FILE": str(self.state / pool / "credential"), "JUDGE_LOCAL_SLOTS": "2",
               "JUDGE_WORKSPACE": str(workspace), "JUDGE_HEALTH_LISTEN": f"127.0.0.1:{self.health_ports[pool]}",
               "JUDGE_TLS_CERT": str(tls["cert"]), "JUDGE_TLS_KEY": str(tls["key"])}
        if pool == "mysql":
            env["JUDGE_MYSQL_URL"] = self.judge_mysql_url
        if weak_sandbox:
            env["JUDGE_ALLOW_WEAK_SANDBOX"] = "1"
        log = open(self.state / pool / "agent.log", "ab")
        agent = subprocess.Popen([sys.executable, "-m", "node_agent"], cwd=ROOT, env=env, stdout=log, stderr=log,
                                 start_new_session=True)
        self.processes.append(agent)
        self.agents[pool] = agent
        say(f"started the {pool} agent (log: {self.state / pool / 'agent.log'})")

    def verify_and_enable(self, nodes: dict, timeout: float = 180) -> list[str]:
        """Wait for each node to join, run its checks, enable it when they pass."""
        deadline = time.monotonic() + timeout
        pending = dict(nodes)
        checks: dict[str, int] = {}
        enabled = []
        while pending and time.monotonic() < deadline:
            for pool, node in list(pending.items()):
                agent = self.agents.get(pool)
                if agent is not None and agent.poll() is not None:
                    say(f"{pool}: the agent stopped (exit {agent.returncode}) before it was enabled: "
                        f"{_last_line(self.state / pool / 'agent.log')}")
                    del pending[pool]
                    continue
                current = self.admin.get(self.base + f"/api/v1/admin/judgers/{node['id']}").json()
                if current["desiredState"] == "ENABLED" and current["observedState"] in ("ready", "busy"):
                    enabled.append(pool)
                    del pending[pool]
                    continue
                if not current["lastHeartbeatAt"] or current["observedState"] == "offline" and \
                        current["desiredState"] == "ENABLED":
                    continue  # not joined yet
                if pool not in checks:
                    response = self.admin.post(self.base + f"/api/v1/admin/judgers/{node['id']}/checks")
                    if response.status_code == 202:
                        checks[pool] = response.json()["checkId"]
                        say(f"{pool}: joined; running the connectivity check and self-check")
                    continue
                check = self.admin.get(self.base + f"/api/v1/admin/judgers/{node['id']}/checks/{checks[pool]}").json()
                if check["status"] == "PASSED":
                    response = self.admin.patch(self.base + f"/api/v1/admin/judgers/{node['id']}", json={
                        "revision": current["revision"], "desiredState": "ENABLED"})
                    if response.status_code == 200:
                        say(f"{pool}: self-check passed ({len(check['items'])} items); node enabled")
                elif check["status"] == "FAILED":
                    failed = [f"{i['name']}: {i['detail']}" for i in check["items"] if not i["ok"]]
                    say(f"{pool}: check FAILED — {'; '.join(failed)[:300]}")
                    del pending[pool]
            time.sleep(0.5)
        for pool in pending:
            say(f"{pool}: not enabled in time; see {self.state / pool / 'agent.log'}")
        return enabled

    # --- the show -----------------------------------------------------------------------------------

    def submit_samples(self, pools: list[str]) -> list[tuple]:
        from judging.models import Problem

        ids = dict(Problem.objects.values_list("slug", "id"))
        submitted = []
        for _package, slug, language, source, _verdict in sample_solutions(pools):
            response = self.student.post(self.base + "/api/v1/submissions", json={
                "problemId": ids[slug], "language": language, "code": source.read_text()})
            if response.status_code != 202:
                # Refused as a student would be (the problem is in a running exam, say, in a
                # database an earlier run left): said, and the show goes on.
                try:
                    refusal = response.json()
                except ValueError:
                    refusal = {}
                say(f"{language:6} {slug:20} {source.name:13} refused: {response.status_code} "
                    f"{refusal.get('error', '')} — {refusal.get('detail', response.text[:200])}")
                continue
            body = response.json()
            submitted.append((slug, language, source.name, body["submissionType"], body["submissionId"]))
        say(f"submitted {len(submitted)} sample solutions through the user API")
        return submitted

    def follow(self, submitted: list[tuple], timeout: float = 600) -> None:
        waiting = list(submitted)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for item in list(waiting):
                slug, language, name, kind, sid = item
                status = self.student.get(self.base + f"/api/v1/submissions/{kind}/{sid}").json()
                if status["status"] not in ("PENDING", "COMPILING", "JUDGING"):
                    expected = name.split(".")[0].upper()
                    mark = "as intended" if expected == status["status"] else f"(file says {expected})"
                    say(f"{language:6} {slug:20} {name:13} → {status['status']:12} score {status['score']}"
                        f"  {mark}")
                    waiting.remove(item)
            time.sleep(0.5)
        if waiting:
            say(f"{len(waiting)} submissions still judging; watch them in the console")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def sandbox_usable() -> bool:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False
    result = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                            capture_output=True, timeout=10)
    return result.returncode == 0
