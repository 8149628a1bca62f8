"""Judge machines (deploy/systemd/): the agent's template unit passes `systemd-analyze
verify` (in a throwaway root holding the paths it names), its hardening leaves bubblewrap
what it needs and closes what the Compose agents' seccomp profile closes, the settings it
and its env template give make a configuration the agent accepts, and the installer's dry
run changes nothing while saying what it would do."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.test_compose import AGENT_DOCKERFILE, REPO, load_compose, services_built_from
from tests.deploy.tools import program

SYSTEMD = REPO / "deploy" / "systemd"
UNIT = SYSTEMD / "kece-agent@.service"
ENV_TEMPLATE = SYSTEMD / "kece-agent.env.example"
INSTALL = SYSTEMD / "install.sh"
POOLS = ("cpp", "java", "python", "mysql", "arkts")

# What bubblewrap and the agent call (the same list tests/deploy/test_compose.py keeps open
# in the Compose agents' seccomp profile), and what that profile keeps closed.
NEEDED_SYSCALLS = ("clone", "clone3", "unshare", "mount", "umount2", "pivot_root", "setns", "prctl", "capset",
                   "sethostname", "execve", "wait4", "pidfd_open", "pidfd_send_signal", "prlimit64", "setresuid",
                   "setresgid", "chown", "kill")
CLOSED_SYSCALLS = ("io_uring_setup", "keyctl", "bpf", "perf_event_open", "userfaultfd", "ptrace",
                   "open_by_handle_at", "init_module", "kexec_load")


def systemd_analyze() -> str:
    return program("systemd-analyze", "scripts/setup.sh installs Debian's systemd package")


def unit_settings(text: str) -> dict[str, list[str]]:
    """[Section]Key → every value given, in order (systemd keys may repeat)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return settings


@pytest.fixture(scope="module")
def unit() -> dict[str, list[str]]:
    return unit_settings(UNIT.read_text())


def one(unit: dict, key: str) -> str:
    (value,) = unit[key]
    return value


def rendered_env(pool: str, instance: str | None = None, port: int = 8443) -> dict[str, str]:
    instance = instance or pool
    text = ENV_TEMPLATE.read_text().replace("@POOL@", pool).replace("@INSTANCE@", instance).replace("@PORT@", str(port))
    assert "@" not in re.sub(r"(?m)^#.*$", "", text).replace("kece-agent@", ""), "a placeholder is left"
    env = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def unit_environment(unit: dict, instance: str) -> dict[str, str]:
    env = {}
    for item in unit["Service.Environment"]:
        key, _, value = item.partition("=")
        env[key] = value.replace("%i", instance)
    return env


def dry_run(*args: str, stub_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(INSTALL), "--dry-run", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{stub_dir}:{os.environ['PATH']}", "HOME": str(stub_dir)})


@pytest.fixture
def stubs(tmp_path) -> Path:
    """Programs that change a machine, replaced by ones that only note they were called."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("apt-get", "useradd", "systemctl", "install", "cp", "rm", "find", "chown", "chmod", "mv", "npm",
                 "pip", "python3.11-venv"):
        stub = folder / name
        stub.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {tmp_path / 'called'}\nexit 1\n")
        stub.chmod(0o755)
    return folder


def dropin_from_dry_run(output: str, name: str) -> str:
    match = re.search(rf"^\+ write (\S*/{re.escape(name)}) \(mode \d+\):\n((?:    .*\n|\n)*)", output, re.M)
    assert match, f"the dry run writes no {name}"
    return "".join(line[4:] + "\n" for line in match.group(2).splitlines())


# --- systemd-analyze verify ------------------------------------------------------------------

def test_the_unit_verifies_for_a_pool_and_for_the_mysql_pools_unprivileged_instance(unit, stubs, tmp_path):
    analyze = systemd_analyze()
    root = tmp_path / "root"
    (root / "usr/lib/systemd").mkdir(parents=True)
    # systemd's own units (sysinit.target, …), which every service depends on.
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    shutil.copy(UNIT, units / UNIT.name)
    program = Path(one(unit, "Service.ExecStart").split()[0])
    (root / program.relative_to("/")).parent.mkdir(parents=True)
    (root / program.relative_to("/")).write_text("#!/bin/sh\n")
    (root / program.relative_to("/")).chmod(0o755)
    (root / one(unit, "Service.WorkingDirectory").lstrip("/")).mkdir(parents=True, exist_ok=True)
    for pool in ("cpp", "mysql"):
        env_file = Path(one(unit, "Service.EnvironmentFile").replace("%i", pool))
        (root / env_file.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / env_file.relative_to("/")).write_text(
            "".join(f"{k}={v}\n" for k, v in rendered_env(pool).items()))
    output = dry_run("mysql", stub_dir=stubs).stdout
    dropin_dir = units / "kece-agent@mysql.service.d"
    dropin_dir.mkdir()
    (dropin_dir / "10-unprivileged.conf").write_text(dropin_from_dry_run(output, "10-unprivileged.conf"))
    for instance in ("cpp", "mysql"):
        result = subprocess.run([analyze, f"--root={root}", "verify", str(units / f"kece-agent@{instance}.service")],
                                capture_output=True, text=True, timeout=120)
        # verify only warns about unknown keys and bad values: any output is a finding.
        assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


# --- what the hardening leaves open, and closes ----------------------------------------------------

def syscall_group(analyze: str, group: str) -> set[str]:
    out = subprocess.run([analyze, "syscall-filter", group], capture_output=True, text=True, timeout=30, check=True).stdout
    names = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        names |= syscall_group(analyze, line) if line.startswith("@") else {line}
    return names


def test_the_hardening_leaves_bubblewrap_what_it_needs(unit):
    analyze = systemd_analyze()
    assert one(unit, "Service.Delegate") == "yes", "no cgroup of its own: no memory.max per run"
    assert set(one(unit, "Service.RestrictNamespaces").split()) >= {"user", "pid", "net", "mnt", "ipc", "uts", "cgroup"}
    # Each hides part of /proc; the kernel then refuses the fresh /proc of every sandbox.
    for key in ("ProtectKernelTunables", "ProtectKernelLogs", "ProtectProc", "ProcSubset"):
        assert f"Service.{key}" not in unit, key
    # Its seccomp filter refuses sethostname(), which names each sandbox (`--hostname`).
    assert "Service.ProtectHostname" not in unit
    assert '"--hostname"' in (REPO / "node_agent" / "sandbox.py").read_text()
    # Inherited by the sandbox: the JVM and Node.js need writable executable memory.
    assert "Service.MemoryDenyWriteExecute" not in unit
    assert unit.get("Service.ProtectControlGroups", ["no"]) == ["no"]
    denied = set()
    for item in unit["Service.SystemCallFilter"]:
        assert item.startswith("~"), "an allow-list would be inherited by, and break, the runtimes"
        for word in item[1:].split():
            denied |= syscall_group(analyze, word) if word.startswith("@") else {word}
    for name in NEEDED_SYSCALLS:
        assert name not in denied, f"bubblewrap or the agent needs {name}"
    for name in CLOSED_SYSCALLS:
        assert name in denied, f"{name} should stay closed, as in the Compose agents' profile"
    assert one(unit, "Service.NoNewPrivileges") == "yes" and one(unit, "Service.ProtectSystem") == "strict"


def test_the_agent_gets_the_capabilities_of_the_compose_agents_and_no_more(unit):
    compose_agent = load_compose()["services"]["agent-cpp"]
    wanted = {f"CAP_{c}" for c in compose_agent["cap_add"]}
    assert set(one(unit, "Service.CapabilityBoundingSet").split()) == wanted
    assert one(unit, "Service.User") == "root", "the sandbox's process limit needs a non-root sandbox uid"


def test_a_stop_leaves_running_jobs_their_grace(unit):
    grace_ms = int(rendered_env("cpp")["JUDGE_STOP_GRACE_MS"])
    assert int(one(unit, "Service.TimeoutStopSec")) * 1000 > grace_ms
    # SIGTERM to the agent alone; the sandboxes die with the cgroup only after the grace.
    assert one(unit, "Service.KillMode") == "mixed"
    assert set(one(unit, "Service.RestartPreventExitStatus").split()) == {"2", "4"}


# --- the settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("pool", POOLS)
def test_the_unit_and_its_env_file_make_a_configuration_the_agent_accepts(unit, pool, tmp_path):
    from node_agent.config import load, parse_control_url

    agent_source = (REPO / "node_agent" / "config.py").read_text()
    env = unit_environment(unit, pool)
    env.update(rendered_env(pool))  # EnvironmentFile= overrides Environment=
    for var in env:
        if var.startswith("JUDGE_"):
            assert re.search(rf"[\"']{var}[\"']", agent_source), f"node_agent/config.py does not read {var}"
    assert env["JUDGE_POOL"] == pool and env["JUDGE_MODE"] == "pool"
    origin, plain = parse_control_url(env["JUDGE_CONTROL_URL"])
    assert not plain
    # The state folders of the unit, made under a temporary root.
    state = Path(env["JUDGE_CREDENTIAL_FILE"]).parents[1]
    assert state == Path("/var/lib") / one(unit, "Service.StateDirectory").replace("%i", pool)
    assert not Path(env["JUDGE_CREDENTIAL_FILE"]).is_relative_to(env["JUDGE_WORKSPACE"])
    for var in ("JUDGE_CREDENTIAL_FILE", "JUDGE_WORKSPACE", "JUDGE_TLS_CERT", "JUDGE_TLS_KEY", "JUDGE_CA_FILE"):
        env[var] = str(tmp_path / env[var].lstrip("/"))
    Path(env["JUDGE_CREDENTIAL_FILE"]).parent.mkdir(parents=True)
    Path(env["JUDGE_CREDENTIAL_FILE"]).write_text("join-code\n")
    import trustme

    for var in ("JUDGE_TLS_CERT", "JUDGE_TLS_KEY", "JUDGE_CA_FILE"):
        Path(env[var]).parent.mkdir(parents=True, exist_ok=True)
        Path(env[var]).write_text("-----BEGIN CERTIFICATE-----\n")
    Path(env["JUDGE_CA_FILE"]).write_bytes(trustme.CA().cert_pem.bytes())  # the agent loads it
    if pool == "mysql":
        env["JUDGE_MYSQL_URL"] = "mysql://root:secret@127.0.0.1:3306/"
    config = load(env)
    assert config.pool == pool and config.health_listen == ("0.0.0.0", 8443)


def test_the_env_template_carries_the_settings_the_compose_agents_set(unit):
    """What the Compose agents configure (besides their container paths) a judge machine
    configures too, so neither deployment lacks a setting the other needs."""
    env = unit_environment(unit, "cpp") | rendered_env("cpp")
    for name, service in services_built_from(load_compose(), AGENT_DOCKERFILE).items():
        for var in service["environment"]:
            if var.endswith("_FILE") and var != "JUDGE_CREDENTIAL_FILE" or var == "JUDGE_MYSQL_URL_FILE":
                continue
            assert var in env, f"{var} ({name} sets it) is missing on judge machines"


# --- the installer ------------------------------------------------------------------------------

def test_the_installers_dry_run_changes_nothing_and_says_what_it_would_do(stubs, tmp_path):
    result = dry_run("--port", "9443", "--join-code", "abc123", "cpp", stub_dir=stubs)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "called").exists(), (tmp_path / "called").read_text()
    out = result.stdout
    for step in ("+ env DEBIAN_FRONTEND=noninteractive apt-get install", " bubblewrap libseccomp2 util-linux ", " g++",
                 f"+ install -m 0644 {UNIT} /etc/systemd/system/kece-agent@.service",
                 "+ write /etc/kece-agent/cpp.env (mode 0640):",
                 "+ install -d -m 0700 -o root -g root /var/lib/kece-agent/cpp/credential",
                 "+ write /var/lib/kece-agent/cpp/credential/credential (mode 0600):\n    abc123\n",
                 "+ systemctl enable kece-agent@cpp.service"):
        assert step in out, f"the dry run does not say: {step!r}"
    assert "JUDGE_HEALTH_LISTEN=0.0.0.0:9443" in out
    assert "requests==" in out and "mysqlclient" not in out
    assert "systemctl restart" not in out, "started without --start"
    assert "10-unprivileged.conf" not in out, "only the mysql pool runs unprivileged"


def test_the_installer_gives_the_mysql_pool_an_unprivileged_user(stubs):
    out = dry_run("mysql", stub_dir=stubs).stdout
    dropin = unit_settings(dropin_from_dry_run(out, "10-unprivileged.conf"))
    assert dropin["Service.User"] == ["kece-agent"] and dropin["Service.CapabilityBoundingSet"] == [""]
    assert "+ install -d -m 0700 -o kece-agent -g kece-agent /var/lib/kece-agent/mysql/credential" in out
    assert "mysqlclient==" in out


def test_the_installer_refuses_what_it_cannot_install(stubs, tmp_path):
    for args in (["fortran"], ["--instance", "../etc", "cpp"], ["--port", "84x", "cpp"], ["cpp", "java"],
                 ["--bogus", "cpp"]):
        result = dry_run(*args, stub_dir=stubs)
        assert result.returncode == 2, args
    assert not (tmp_path / "called").exists()


def test_the_installer_runs_only_as_root_without_a_dry_run(stubs, tmp_path):
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("needs a non-root user to run as")
    argv = ["sh", str(INSTALL), "cpp"]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/",
                            env={"PATH": f"{stubs}:{os.environ['PATH']}"})
    assert result.returncode == 2 and "as root" in result.stderr
    assert not (tmp_path / "called").exists()


def test_an_emptied_credential_file_takes_the_new_join_code(stubs, tmp_path):
    """deploy/README.md re-registers an agent by emptying its credential file and running the
    installer with a new code: the empty file is replaced (it was kept, the agent then exited
    on an empty credential). One that holds something is left as it is."""
    state = tmp_path / "state"
    installer = tmp_path / "install.sh"
    installer.write_text(INSTALL.read_text().replace("statedir=/var/lib/kece-agent", f"statedir={state}")
                         .replace('here=$(cd "$(dirname "$0")" && pwd)', f"here={SYSTEMD}"))
    credential = state / "cpp" / "credential" / "credential"
    credential.parent.mkdir(parents=True)

    def dry(*args):
        result = subprocess.run(["sh", str(installer), "--dry-run", *args], capture_output=True, text=True,
                                timeout=60, env={"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": str(stubs)})
        assert result.returncode == 0, result.stderr
        return result.stdout + result.stderr

    credential.write_text("")
    out = dry("--join-code", "new-code-1", "cpp")
    assert f"+ write {credential} (mode 0600):\n    new-code-1\n" in out and "keeping" not in out
    credential.write_text("a-credential\n")
    out = dry("--join-code", "new-code-2", "cpp")
    assert "already holds a join code or credential; left as it is" in out and "new-code-2" not in out


def test_the_installer_says_so_when_the_machines_python_is_too_old(stubs):
    old = stubs / "python3"
    old.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "Python 3.10.12" && exit 0\nexit 1\n')
    old.chmod(0o755)
    result = dry_run("cpp", stub_dir=stubs)
    assert result.returncode == 2
    assert "the agent needs Python 3.11 or newer; this machine's python3 is Python 3.10.12" in result.stderr
    assert "kece-agent@cpp.service" not in result.stdout, "nothing enabled"
