"""The Compose deployment (deploy/compose/) holds together without Docker.

Every service has something to run, every command it runs exists in the code, every
variable it sets is one the program reads, every pool has its agent, the proxy keeps the
node API off the public listener, and every file the deployment refers to exists (or is
made by make-secrets.sh). No database is needed: nothing here asks for the `db` fixture.
"""

from __future__ import annotations

import ast
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "compose"
COMPOSE_FILE = DEPLOY / "compose.yaml"
NGINX_CONF = DEPLOY / "nginx.conf"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
BASE_ENV = {"KECE_DOMAIN": "judge.example.org"}
SERVER_DOCKERFILE = "deploy/compose/Dockerfile.server"
AGENT_DOCKERFILE = "deploy/compose/Dockerfile.agent"
REQUIRE = os.environ.get("KECE_REQUIRE_SERVICES") == "1"


# --- helpers --------------------------------------------------------------------------------

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value, env: dict):
    """Compose's variable interpolation, applied to every string of a parsed file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        current = env.get(name)
        if op == ":-":
            return current if current else arg
        if op == "-":
            return current if current is not None else arg
        if op in (":?", "?"):
            if not current:
                raise KeyError(f"{name} is required: {arg}")
            return current
        return current or ""

    return _VAR.sub(sub, value)


def load_compose(env: dict | None = None) -> dict:
    return interpolate(yaml.safe_load(COMPOSE_FILE.read_text()), dict(BASE_ENV, **(env or {})))


def dockerfile_of(service: dict) -> str | None:
    build = service.get("build")
    if isinstance(build, dict):
        return build.get("dockerfile", "Dockerfile")
    return None


def services_built_from(compose: dict, dockerfile: str) -> dict:
    return {name: s for name, s in compose["services"].items() if dockerfile_of(s) == dockerfile}


def environment(service: dict) -> dict:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: ("" if v is None else str(v)) for k, v in env.items()}


def command_argv(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(x) for x in command]


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) pairs, continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    out = []
    for line in logical:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerfile_cmd(path: Path) -> list[str]:
    cmds = [rest for word, rest in dockerfile_instructions(path) if word == "CMD"]
    assert cmds, f"{path.name} has no CMD"
    return json.loads(cmds[-1])


def module_defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
    return False


def string_constants(path: Path) -> dict[str, str]:
    """Module-level string constants (literals and `+` of known ones), read without importing."""
    known: dict[str, str] = {}

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = value(node.left), value(node.right)
            return None if left is None or right is None else left + right
        return None

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found = value(node.value)
            if found is not None:
                known[node.targets[0].id] = found
    return known


def management_commands() -> set[str]:
    from django.core.management import get_commands

    return set(get_commands())


def check_command(argv: list[str], where: str) -> None:
    """Assert that what `argv` runs exists in this repository (or in Django)."""
    if argv[:2] in (["sh", "-c"], ["/bin/sh", "-c"]):
        for part in re.split(r"&&|\|\||;", argv[2]):
            if part.strip():
                check_command(shlex.split(part), where)
        return
    program = os.path.basename(argv[0])
    if program in ("python", "python3") and len(argv) >= 3 and argv[1] == "manage.py":
        assert (REPO / "manage.py").is_file()
        assert argv[2] in management_commands(), f"{where}: `manage.py {argv[2]}` is not a management command"
    elif program in ("python", "python3") and len(argv) >= 3 and argv[1] == "-m":
        package = REPO / argv[2].replace(".", "/")
        assert (package / "__main__.py").is_file() or package.with_suffix(".py").is_file(), \
            f"{where}: `python -m {argv[2]}` has no __main__"
    elif program == "uvicorn":
        target = next(a for a in argv[1:] if not a.startswith("-"))
        module, _, attr = target.partition(":")
        path = REPO / (module.replace(".", "/") + ".py")
        assert path.is_file(), f"{where}: {module} does not exist"
        assert module_defines(path, attr or "app"), f"{where}: {module} defines no {attr}"
    elif program == "celery":
        index = argv.index("-A") if "-A" in argv else argv.index("--app")
        app = argv[index + 1]
        path = REPO / app.replace(".", "/") / "celery.py"
        assert path.is_file(), f"{where}: {path} does not exist"
        assert module_defines(path, "app"), f"{where}: {path} defines no `app`"
    else:
        raise AssertionError(f"{where}: unknown program {argv[0]!r}; teach this test what it is")


def string_literal_in(source: str, name: str) -> bool:
    return re.search(r"""["']%s["']""" % re.escape(name), source) is not None


def entrypoint_file_vars() -> set[str]:
    match = re.search(r"^for name in ([A-Z_ ]+); do", ENTRYPOINT.read_text(), re.M)
    assert match, "entrypoint.sh lists the NAME_FILE variables it resolves"
    return set(match.group(1).split())


# --- nginx.conf ----------------------------------------------------------------------------

def parse_nginx(text: str) -> list:
    """A tree of (directive, args, children-or-None)."""
    text = re.sub(r"(?m)#.*$", "", text)
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[{};]|[^\s{};"\']+', text)
    root: list = []
    stack, current = [root], []
    for token in tokens:
        if token == ";":
            stack[-1].append((current[0], current[1:], None))
            current = []
        elif token == "{":
            node = (current[0], current[1:], [])
            stack[-1].append(node)
            stack.append(node[2])
            current = []
        elif token == "}":
            stack.pop()
        else:
            current.append(token[1:-1] if token[0] in "\"'" else token)
    assert len(stack) == 1 and not current, "nginx.conf: unbalanced braces"
    return root


def children(block: list, name: str) -> list:
    return [node for node in block if node[0] == name]


def directive(block: list, name: str):
    found = children(block, name)
    return found[-1][1] if found else None


def servers() -> list[list]:
    (http,) = children(parse_nginx(NGINX_CONF.read_text()), "http")
    return [node[2] for node in http[2] if node[0] == "server"]


def server_listening_on(port: int) -> list:
    for server in servers():
        for listen in children(server, "listen"):
            if listen[1][0].rsplit(":", 1)[-1] == str(port):
                return server
    raise AssertionError(f"nginx.conf has no server listening on {port}")


def select_location(server: list, path: str):
    """nginx's location choice: exact, then longest prefix (^~ stops), then regexes in order."""
    locations = [node for node in server if node[0] == "location"]
    prefix_best = None
    for _, args, body in locations:
        if args[0] == "=" and args[1] == path:
            return args, body
    for _, args, body in locations:
        if args[0] in ("~", "~*", "="):
            continue
        prefix = args[1] if args[0] == "^~" else args[0]
        if path.startswith(prefix) and (prefix_best is None or len(prefix) > len(prefix_best[0])):
            prefix_best = (prefix, args, body)
    if prefix_best and prefix_best[1][0] == "^~":
        return prefix_best[1], prefix_best[2]
    for _, args, body in locations:
        if args[0] in ("~", "~*"):
            if re.search(args[1], path, re.I if args[0] == "~*" else 0):
                return args, body
    assert prefix_best, f"no location serves {path}"
    return prefix_best[1], prefix_best[2]


def refuses(body: list) -> bool:
    deny = directive(body, "deny")
    ret = directive(body, "return")
    closed = deny == ["all"] or (ret is not None and ret[0] in ("403", "404"))
    return closed and directive(body, "proxy_pass") is None


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m|h)?", value)
    assert match, value
    factor = {"ms": 0.001, None: 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    return int(match.group(1)) * factor


# --- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def settings_source() -> str:
    return (REPO / "kece" / "settings.py").read_text()


@pytest.fixture(scope="module")
def agent_config_source() -> str:
    return (REPO / "node_agent" / "config.py").read_text()


def need_openssl() -> None:
    if shutil.which("openssl"):
        return
    if REQUIRE:
        pytest.fail("openssl is required (KECE_REQUIRE_SERVICES=1)")
    pytest.skip("openssl is not available")


@pytest.fixture(scope="module")
def made_secrets(tmp_path_factory) -> dict:
    """make-secrets.sh run into a temporary folder; the variables that point compose there."""
    need_openssl()
    root = tmp_path_factory.mktemp("compose-secrets")
    env = {"KECE_SECRETS_DIR": str(root / "secrets"), "KECE_CERTS_DIR": str(root / "certs")}
    result = subprocess.run(["sh", str(DEPLOY / "make-secrets.sh"), BASE_ENV["KECE_DOMAIN"]],
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return env


# --- the file and its services ---------------------------------------------------------------

def test_compose_parses_and_has_the_services(compose):
    expected = {"mysql", "redis", "migrate", "web", "node-api", "worker", "probe-worker", "proxy", "judge-mysql",
                "agent-cpp", "agent-java", "agent-python", "agent-mysql", "agent-arkts"}
    assert expected <= set(compose["services"])


def test_domain_is_required():
    with pytest.raises(KeyError, match="KECE_DOMAIN"):
        interpolate(yaml.safe_load(COMPOSE_FILE.read_text()), {})


def test_every_service_has_an_image_or_a_build(compose):
    for name, service in compose["services"].items():
        assert service.get("image") or service.get("build"), f"{name} has neither image nor build"
        if service.get("image") and not service.get("build"):
            assert ":" in service["image"] and not service["image"].endswith(":latest"), \
                f"{name}: pin the image version ({service['image']})"


def test_build_contexts_dockerfiles_and_copied_files_exist(compose):
    built = {name: s for name, s in compose["services"].items() if s.get("build")}
    assert built
    for name, service in built.items():
        context = (DEPLOY / service["build"]["context"]).resolve()
        assert context == REPO, f"{name}: build context should be the repository root"
        dockerfile = context / service["build"]["dockerfile"]
        assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"
        ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
        assert ignore.is_file(), f"{name}: {ignore.name} keeps secrets out of the build context"
        allowed = [line[1:] for line in ignore.read_text().splitlines() if line.startswith("!")]
        for word, rest in dockerfile_instructions(dockerfile):
            if word not in ("COPY", "ADD") or "--from=" in rest:
                continue
            parts = [p for p in rest.split() if not p.startswith("--")]
            for source in parts[:-1]:
                assert (context / source).exists(), f"{dockerfile.name}: COPY {source}: missing"
                assert any(source == a or source.startswith(a.rstrip("/") + "/") for a in allowed), \
                    f"{ignore.name} leaves {source} out of the build context"


def test_the_server_image_holds_every_folder_the_settings_read_files_from():
    """What the server reads at run time beyond its code: the templates, the static files and
    the translations (without `locale/`, every deployment served English only)."""
    from django.conf import settings

    copied = {rest.split()[-1].removeprefix("./") for word, rest in
              dockerfile_instructions(DEPLOY / "Dockerfile.server") if word == "COPY" and "--from=" not in rest}
    read = [*settings.LOCALE_PATHS, *settings.STATICFILES_DIRS, *(d for t in settings.TEMPLATES for d in t["DIRS"])]
    for folder in read:
        assert Path(folder).relative_to(REPO).parts[0] in copied, folder


def test_the_judge_mysql_caps_what_a_session_may_raise_its_in_memory_tables_to(compose):
    command = compose["services"]["judge-mysql"]["command"]
    for option in ("--maximum-max_heap_table_size", "--maximum-tmp_table_size"):
        (value,) = [item.split("=", 1)[1] for item in command if item.startswith(option + "=")]
        assert value.endswith("M") and int(value[:-1]) <= 256, (option, value)


def test_dockerfiles_use_the_requested_base_and_packages():
    server = (DEPLOY / "Dockerfile.server").read_text()
    agent = (DEPLOY / "Dockerfile.agent").read_text()
    for text in (server, agent):
        assert "python:3.11-slim-bookworm" in text
    assert "pip install" in server and "--editable" not in server and " -e " not in server
    assert re.search(r"^USER (?!root)\w+", server, re.M), "the server image runs as a non-root user"
    for package in ("bubblewrap", "util-linux", "g++", "openjdk-17-jdk-headless", "python3", "nodejs",
                    "typescript@5.9.3", "ARG POOL"):
        assert package in agent, f"Dockerfile.agent does not install {package}"


def test_mounted_files_exist(compose):
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")):
                assert (DEPLOY / source).exists(), f"{name}: mounted {source} does not exist"
            else:
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"
        for option in service.get("security_opt", []):
            key, _, value = option.replace(":", "=", 1).partition("=")
            if key == "seccomp" and value not in ("unconfined", "builtin"):
                profile = json.loads((DEPLOY / value).read_text())
                assert profile["syscalls"], f"{name}: empty seccomp profile"


def test_service_commands_exist_in_the_code(compose):
    for name, service in compose["services"].items():
        dockerfile = dockerfile_of(service)
        if dockerfile is None:
            continue  # a third-party image runs its own program
        argv = command_argv(service["command"]) if "command" in service else dockerfile_cmd(REPO / dockerfile)
        check_command(argv, name)
    for dockerfile in (SERVER_DOCKERFILE, AGENT_DOCKERFILE):
        check_command(dockerfile_cmd(REPO / dockerfile), dockerfile)


def test_healthchecks_are_valid(compose):
    for name, service in compose["services"].items():
        test = (service.get("healthcheck") or {}).get("test")
        if not test:
            continue
        if test[0] == "CMD" and test[1] in ("python", "python3") and test[2] == "-c":
            compile(test[3], f"{name} healthcheck", "exec")
        # A healthcheck does not pass the image's entry point; one that reads the settings
        # runs it itself (it turns DATABASE_URL_FILE into DATABASE_URL).
        commands = [test[1:]] if test[0] == "CMD" else [shlex.split(c.split(">")[0]) for c in test[1].split("&&")]
        for argv in commands:
            if argv[0] == "kece-entrypoint":
                argv = argv[1:]
            elif argv[:3] == ["python", "-m", "kece.probe"]:
                raise AssertionError(f"{name} healthcheck: the probe reads the settings; run it through kece-entrypoint")
            if argv[0] == "celery" or argv[:2] == ["python", "-m"]:
                check_command(argv, f"{name} healthcheck")


def test_web_is_healthy_when_ready_and_celery_processes_when_their_loops_beat(compose):
    """The web healthcheck asks /readyz (so a draining or unmigrated process is not
    healthy); the workers' probes read the heartbeats their loops leave (kece/probe.py),
    the beat's too where it runs."""
    services = compose["services"]
    assert "'/readyz'" in " ".join(services["web"]["healthcheck"]["test"])
    for name, kinds in (("worker", ["worker", "beat"]), ("probe-worker", ["worker"])):
        test = " ".join(services[name]["healthcheck"]["test"][1:])
        assert re.findall(r"python -m kece\.probe (\w+)", test) == kinds, test
        assert "--beat" in services[name]["command"] or "beat" not in kinds


def test_documented_management_commands_exist():
    text = (DEPLOY / "README.md").read_text() + COMPOSE_FILE.read_text()
    named = set(re.findall(r"manage\.py (\w+)", text))
    assert {"migrate", "collectstatic", "createsuperuser", "drf_create_token"} <= named
    missing = named - management_commands()
    assert not missing, f"not management commands: {sorted(missing)}"


# --- environment ---------------------------------------------------------------------------

SERVER_VARS_REQUIRED = {
    "DEBUG", "SECRET_KEY_FILE", "DATABASE_URL_FILE", "REDIS_URL", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS",
    "KECE_ARTIFACT_ROOT", "KECE_PROBE_ALLOWED_NETWORKS", "KECE_PROBE_ALLOWED_PORTS", "KECE_PROBE_CA_FILE",
}


def test_server_variables_are_read_by_settings(compose, settings_source):
    server = services_built_from(compose, SERVER_DOCKERFILE)
    assert {"web", "worker", "migrate"} <= set(server)
    via_entrypoint = entrypoint_file_vars()
    # The process group's name, read where the metrics are kept.
    metrics_group_env = string_constants(REPO / "kece" / "metrics.py")["GROUP_ENV"]
    for name, service in server.items():
        env = environment(service)
        assert SERVER_VARS_REQUIRED <= set(env), f"{name} misses {sorted(SERVER_VARS_REQUIRED - set(env))}"
        assert env["DEBUG"] == "0"
        for var in env:
            if string_literal_in(settings_source, var) or var == metrics_group_env:
                continue
            base = var.removesuffix("_FILE")
            assert var.endswith("_FILE") and string_literal_in(settings_source, base), \
                f"{name}: kece/settings.py does not read {var}"
            # NAME_FILE: either settings read it themselves (_secret), or the entry point does.
            assert re.search(r"_secret\(\s*[\"']%s[\"']" % base, settings_source) or base in via_entrypoint, \
                f"{name}: nothing reads {var}"


def test_web_and_workers_agree_on_the_timings(compose):
    web = environment(compose["services"]["web"])
    for name in ("node-api", "worker", "probe-worker"):
        worker = environment(compose["services"][name])
        for var in set(web) | set(worker):
            # How long each process keeps its own database connection, and which metrics
            # group it counts in, are its own affair.
            if var.startswith("KECE_") and var not in ("KECE_CONN_MAX_AGE", "KECE_METRICS_GROUP"):
                assert web.get(var) == worker.get(var), f"web and {name} disagree on {var}"


def _queues_of(service: dict) -> set[str]:
    argv = command_argv(service["command"])
    assert argv[:4] == ["celery", "-A", "kece", "worker"]
    (queues,) = [a.removeprefix("--queues=") for a in argv if a.startswith("--queues=")]
    return set(queues.split(","))


def test_node_checks_have_a_worker_of_their_own_and_beat_never_waits_on_them(compose):
    from kece.celery import app
    from kece.scheduler import PERIODIC_TASKS

    def route(task: str) -> str:
        return app.amqp.router.route({}, task, (), {})["queue"].name

    worker, prober = compose["services"]["worker"], compose["services"]["probe-worker"]
    assert "--beat" in command_argv(worker["command"]) and "--beat" not in command_argv(prober["command"])
    assert _queues_of(prober) == {route("nodes.run_check")}
    assert _queues_of(worker) == {route(name) for name, _ in PERIODIC_TASKS()}
    assert not _queues_of(worker) & _queues_of(prober)


def test_artifacts_are_shared_by_web_and_worker(compose):
    # The node API serves the test data the others store: web imports problems, the probe
    # worker a self-check's canary programs (on a read-only root it could store nothing).
    mounts = {}
    for name in ("web", "node-api", "worker", "probe-worker"):
        service = compose["services"][name]
        root = environment(service)["KECE_ARTIFACT_ROOT"]
        (volume,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == root]
        mounts[name] = volume
    assert len(set(mounts.values())) == 1 and mounts["web"] in compose["volumes"]


def test_the_node_api_runs_on_processes_of_its_own_the_internal_listener_sends_nodes_to(compose):
    """A flood of submissions on `web` never holds up a result post: the nodes' requests go
    to `node-api`, the same application on its own processes, which counts its metrics in
    a group of its own of the folder `web`'s /metrics adds up."""
    services = compose["services"]
    web, node_api = services["web"], services["node-api"]
    web_argv, node_argv = command_argv(web["command"]), command_argv(node_api["command"])
    assert node_argv[:3] == web_argv[:3] == ["python", "-m", "kece.serve"]
    (http,) = children(parse_nginx(NGINX_CONF.read_text()), "http")
    upstreams = {args[0]: body for name, args, body in http[2] if name == "upstream"}
    port = [a.split("=", 1)[1] for a in node_argv if a.startswith("--port=")]
    assert directive(upstreams["kece_node_api"], "server")[0] == f"node-api:{port[0]}"
    assert directive(upstreams["kece_web"], "server")[0].startswith("kece-web:")
    assert node_api["healthcheck"] == web["healthcheck"]
    assert set(node_api["networks"]) >= {"data", "front"}
    metrics_dir = environment(web)["KECE_METRICS_DIR"]
    assert environment(node_api)["KECE_METRICS_DIR"] == metrics_dir
    assert environment(node_api).get("KECE_METRICS_GROUP") not in (None, environment(web).get("KECE_METRICS_GROUP", "web"))
    mounted = {name: [v.split(":")[0] for v in services[name]["volumes"] if v.split(":")[1] == metrics_dir]
               for name in ("web", "node-api")}
    assert mounted["web"] == mounted["node-api"] and len(mounted["web"]) == 1
    assert "node-api" in services["proxy"]["depends_on"]


def _names_on(name: str, service: dict, network: str) -> set:
    """The names a service answers to on one of its networks: its own and that network's aliases."""
    networks = service.get("networks") or []
    config = (networks.get(network) or {}) if isinstance(networks, dict) else {}
    return {name, *config.get("aliases", [])}


def test_the_servers_believe_forwarded_headers_from_the_proxys_own_network_only(compose):
    """An agent on `judge` that opens a connection to web:8000 itself is taken at its own
    address, whatever X-Forwarded-For it sends: the join throttle counts that address."""
    services = compose["services"]
    (front,) = [pool["subnet"] for pool in compose["networks"]["front"]["ipam"]["config"]]
    assert compose["networks"]["front"].get("internal") is True
    for name in ("web", "node-api"):
        argv = command_argv(services[name]["command"])
        assert "--proxy-headers" in argv
        (trusted,) = [a.split("=", 1)[1] for a in argv if a.startswith("--forwarded-allow-ips=")]
        assert [ipaddress.ip_network(t) for t in trusted.split(",")] == [ipaddress.ip_network(front)], name
        assert environment(services[name])["KECE_NUM_PROXIES"] == "0", name
    on_front = {name for name, service in services.items() if "front" in (service.get("networks") or [])}
    assert on_front == {"proxy", "web", "node-api"}
    assert "judge" not in services["node-api"]["networks"]
    # The proxy reaches each server by a name that only `front` resolves for it.
    (http,) = children(parse_nginx(NGINX_CONF.read_text()), "http")
    for upstream in (body for directive_name, _, body in http[2] if directive_name == "upstream"):
        host = directive(upstream, "server")[0].rsplit(":", 1)[0]
        shared = [(name, network) for name, service in services.items() if name != "proxy"
                  for network in set(service.get("networks") or []) & set(services["proxy"]["networks"])
                  if host in _names_on(name, service, network)]
        assert {network for _, network in shared} == {"front"}, (host, shared)


def test_agent_variables_are_read_by_the_agent(compose, agent_config_source):
    agents = services_built_from(compose, AGENT_DOCKERFILE)
    via_entrypoint = entrypoint_file_vars()
    for name, service in agents.items():
        for var in environment(service):
            assert var.startswith("JUDGE_"), f"{name}: {var} is not an agent variable"
            if string_literal_in(agent_config_source, var):
                continue
            base = var.removesuffix("_FILE")
            assert var.endswith("_FILE") and base in via_entrypoint \
                and string_literal_in(agent_config_source, base), f"{name}: node_agent/config.py does not read {var}"


def test_secret_paths_in_environments_are_mounted(compose):
    for name, service in compose["services"].items():
        mounted = set()
        for secret in service.get("secrets", []):
            source = secret if isinstance(secret, str) else secret["source"]
            assert source in compose["secrets"], f"{name}: secret {source} is not declared"
            target = source if isinstance(secret, str) else secret.get("target", source)
            mounted.add(target if target.startswith("/") else f"/run/secrets/{target}")
        for var, value in environment(service).items():
            if value.startswith("/run/secrets/"):
                assert value in mounted, f"{name}: {var}={value} is not a mounted secret"


# --- agents ----------------------------------------------------------------------------------

def test_one_agent_per_pool(compose):
    from node_agent import POOLS as AGENT_POOLS
    from pools.registry import POOLS as SERVER_POOLS

    assert set(AGENT_POOLS) == set(SERVER_POOLS)
    agents = services_built_from(compose, AGENT_DOCKERFILE)
    by_pool: dict[str, list[str]] = {}
    for name, service in agents.items():
        env = environment(service)
        assert env["JUDGE_MODE"] == "pool"
        pool = env["JUDGE_POOL"]
        by_pool.setdefault(pool, []).append(name)
        assert service["build"]["args"]["POOL"] == pool, f"{name} builds the image of another pool"
        assert name == f"agent-{pool}"
    assert {pool: len(names) for pool, names in by_pool.items()} == {pool: 1 for pool in AGENT_POOLS}


def test_agents_have_their_own_credential_and_workspace_volumes(compose):
    seen = set()
    for name, service in services_built_from(compose, AGENT_DOCKERFILE).items():
        env = environment(service)
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        credential_dir = str(Path(env["JUDGE_CREDENTIAL_FILE"]).parent)
        workspace = env["JUDGE_WORKSPACE"]
        assert credential_dir in mounts and workspace in mounts, f"{name}: credential and workspace need volumes"
        assert not env["JUDGE_CREDENTIAL_FILE"].startswith(workspace.rstrip("/") + "/")
        for volume in (mounts[credential_dir], mounts[workspace]):
            assert volume in compose["volumes"] and volume not in seen, f"{name}: {volume} is shared"
            seen.add(volume)


def test_agents_reach_the_internal_listener_over_https(compose):
    from node_agent.config import parse_control_url, parse_listen

    proxy = compose["services"]["proxy"]
    internal = server_listening_on(8443)
    assert "ssl" in children(internal, "listen")[0][1]
    web_env = environment(compose["services"]["web"])
    allowed = [ipaddress.ip_network(n) for n in web_env["KECE_PROBE_ALLOWED_NETWORKS"].split(",")]
    ports = web_env["KECE_PROBE_ALLOWED_PORTS"].split(",")
    for name, service in services_built_from(compose, AGENT_DOCKERFILE).items():
        env = environment(service)
        origin, plain = parse_control_url(env["JUDGE_CONTROL_URL"])
        assert not plain, f"{name}: the control URL must be https"
        parts = urlsplit(origin)
        assert parts.port == 8443
        networks = service["networks"]
        assert any(parts.hostname in (proxy["networks"].get(n) or {}).get("aliases", []) for n in networks), \
            f"{name}: {parts.hostname} is not the proxy on the agent's network"
        # The control plane must reach the health endpoint to run the connectivity check.
        _host, port = parse_listen(env["JUDGE_HEALTH_LISTEN"])
        assert str(port) in ports
        for prober in ("web", "probe-worker"):
            assert set(networks) & set(compose["services"][prober]["networks"]), \
                f"{prober} cannot reach {name}'s health endpoint"
        for network in networks:
            for pool in compose["networks"][network].get("ipam", {}).get("config", []):
                subnet = ipaddress.ip_network(pool["subnet"])
                assert any(subnet.subnet_of(a) for a in allowed), f"{subnet} is not an approved node network"
    published = [str(p).rsplit(":", 1)[-1] for p in proxy.get("ports", [])]
    assert "8443" not in published, "the internal listener must not be published by default"


def test_the_judge_mysql_has_memory_and_cpu_limits_an_operator_can_set():
    judge_db = load_compose()["services"]["judge-mysql"]
    assert (judge_db["mem_limit"], str(judge_db["cpus"])) == ("2g", "2")
    tuned = load_compose({"KECE_JUDGE_MYSQL_MEMORY": "6g", "KECE_JUDGE_MYSQL_CPUS": "3.5"})["services"]["judge-mysql"]
    assert (tuned["mem_limit"], str(tuned["cpus"])) == ("6g", "3.5")


def test_mysql_agent_judges_on_its_own_database(compose):
    agent = compose["services"]["agent-mysql"]
    env = environment(agent)
    assert "JUDGE_MYSQL_URL" in env or "JUDGE_MYSQL_URL_FILE" in env
    judge_db = compose["services"]["judge-mysql"]
    control_db = compose["services"]["mysql"]
    assert set(agent["networks"]) & set(judge_db["networks"]), "agent-mysql cannot reach judge-mysql"
    assert not set(agent["networks"]) & set(control_db["networks"]), "agent-mysql must not reach the control plane's MySQL"
    assert judge_db.get("volumes") != control_db.get("volumes")
    for name, service in services_built_from(compose, AGENT_DOCKERFILE).items():
        if name != "agent-mysql":
            assert not {"JUDGE_MYSQL_URL", "JUDGE_MYSQL_URL_FILE"} & set(environment(service))
            assert not set(service["networks"]) & set(judge_db["networks"])


def test_mysql_agent_runs_as_an_unprivileged_user_owning_its_volumes(compose):
    agent = compose["services"]["agent-mysql"]
    uid, _, gid = str(agent.get("user", "")).partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0, "agent-mysql must not run as root"
    assert agent.get("cap_add") == [], "agent-mysql starts no sandbox and needs no capability"
    setup = " ".join(rest for word, rest in dockerfile_instructions(REPO / AGENT_DOCKERFILE) if word == "RUN")
    assert re.search(rf"useradd [^;]*--uid {uid} ", setup), "Dockerfile.agent creates the mysql agent's user"
    mounts = {v.split(":")[1] for v in agent["volumes"]}
    owned = re.search(r'"\$\{POOL\}" = mysql \]; then [^;]*;\s*chown\s+\S+\s+([^;]*);', setup)
    assert owned and mounts <= set(owned.group(1).split()), "the mysql agent's user owns its volumes' mount points"


def test_agents_run_with_least_privilege(compose):
    for name, service in services_built_from(compose, AGENT_DOCKERFILE).items():
        assert not service.get("privileged"), f"{name} must not be privileged"
        assert service.get("cap_drop") == ["ALL"]
        assert set(service.get("cap_add", [])) <= {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}
        options = service["security_opt"]
        assert "no-new-privileges:true" in options
        assert "seccomp=unconfined" not in options and "seccomp:unconfined" not in options
        assert any(o.startswith("seccomp=") for o in options)


def test_agent_seccomp_profile_lets_bubblewrap_work_and_keeps_the_rest_out():
    profile = json.loads((DEPLOY / "agent-seccomp.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {name for rule in profile["syscalls"] for name in rule["names"]}
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO" and rule["errnoRet"] > 0
    for needed in ("clone", "clone3", "unshare", "mount", "umount2", "pivot_root", "setns", "prctl", "capset",
                   "sethostname", "execve", "wait4", "pidfd_open", "pidfd_send_signal", "prlimit64", "setresuid"):
        assert needed not in denied, f"bubblewrap or the agent needs {needed}"
    for closed in ("io_uring_setup", "keyctl", "bpf", "perf_event_open", "userfaultfd", "ptrace",
                   "open_by_handle_at", "init_module", "kexec_load"):
        assert closed in denied, f"{closed} should stay closed"
    arches = {entry["architecture"] for entry in profile["archMap"]}
    assert {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"} <= arches


def test_agent_config_accepts_the_compose_environment(compose, tmp_path):
    from node_agent.config import load

    credential = tmp_path / "credential" / "credential"
    credential.parent.mkdir()
    credential.write_text("join-code\n")
    import trustme

    pem = tmp_path / "file.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    ca = tmp_path / "internal_ca.pem"  # the agent loads it: a CA certificate indeed
    ca.write_bytes(trustme.CA().cert_pem.bytes())
    for name, service in services_built_from(compose, AGENT_DOCKERFILE).items():
        env = environment(service)
        env.pop("JUDGE_MYSQL_URL_FILE", None)
        if env["JUDGE_POOL"] == "mysql":
            env["JUDGE_MYSQL_URL"] = "mysql://root:secret@judge-mysql:3306/"
        env.update(JUDGE_CREDENTIAL_FILE=str(credential), JUDGE_WORKSPACE=str(tmp_path / name),
                   JUDGE_TLS_CERT=str(pem), JUDGE_TLS_KEY=str(pem), JUDGE_CA_FILE=str(ca))
        config = load(env)
        assert config.pool == env["JUDGE_POOL"] and config.health_listen is not None
        assert config.local_slots >= 1


# --- the proxy ---------------------------------------------------------------------------------

def test_proxy_closes_the_node_api_on_the_public_listener():
    public = server_listening_on(443)
    assert "ssl" in children(public, "listen")[0][1]
    for path in ("/api/v1/internal/judgers/jobs/claim", "/api/v1/internal/judgers/session", "/api/v1/internal",
                 "/api/v1/internal/", "/API/V1/Internal/judgers/heartbeat"):
        args, body = select_location(public, path)
        assert refuses(body), f"the public listener serves {path} (location {' '.join(args)})"
    for path in ("/", "/api/v1/submissions", "/api/v1/admin/judgers", "/django-admin/"):
        _args, body = select_location(public, path)
        assert directive(body, "proxy_pass") == ["http://kece_web"], f"the public listener does not serve {path}"


def test_proxy_internal_listener_serves_only_the_node_api(compose):
    constants = string_constants(REPO / "kece" / "asgi.py")
    CLAIM_PATH, INTERNAL_PREFIX = constants["CLAIM_PATH"], constants["INTERNAL_PREFIX"]
    assert CLAIM_PATH.startswith(INTERNAL_PREFIX)

    internal = server_listening_on(8443)
    claim_wait_s = int(environment(compose["services"]["web"])["KECE_CLAIM_WAIT_MS"]) / 1000
    _args, claim = select_location(internal, CLAIM_PATH)
    assert directive(claim, "proxy_pass") == ["http://kece_node_api"]
    assert directive(claim, "proxy_buffering") == ["off"], "long-poll answers must not be buffered"
    read_timeout = directive(claim, "proxy_read_timeout")
    assert read_timeout and seconds(read_timeout[0]) >= claim_wait_s + 15, \
        "proxy_read_timeout must outlast the claim wait plus jitter"
    for path in (INTERNAL_PREFIX + "judgers/session", INTERNAL_PREFIX + "judgers/heartbeat"):
        _args, body = select_location(internal, path)
        assert directive(body, "proxy_pass") == ["http://kece_node_api"]
    for path in ("/", "/django-admin/", "/api/v1/submissions", "/static/admin/css/base.css"):
        _args, body = select_location(internal, path)
        assert refuses(body), f"the internal listener should not serve {path}"


def test_the_public_listener_closes_the_probes_and_revalidates_static_files():
    public = server_listening_on(443)
    for path in ("/readyz", "/readyz/", "/livez", "/READYZ", "/Livez/x"):
        args, body = select_location(public, path)
        assert refuses(body), f"the public listener serves {path} (location {' '.join(args)})"
    for path in ("/readyzx", "/problems"):
        _args, body = select_location(public, path)
        assert directive(body, "proxy_pass") == ["http://kece_web"]
    # Static names carry no version: a browser must ask again after an upgrade.
    _args, static = select_location(public, "/static/kece/site.js")
    assert directive(static, "expires") == ["-1"]


def test_proxy_serves_the_metrics_on_the_internal_listener_only():
    metrics_path = string_constants(REPO / "kece" / "asgi.py")["METRICS_PATH"]
    public = server_listening_on(443)
    for path in (metrics_path, metrics_path + "/", "/METRICS", "/Metrics/x"):
        args, body = select_location(public, path)
        assert refuses(body), f"the public listener serves {path} (location {' '.join(args)})"
    for path in ("/metricsx", "/metrics-page"):  # only that path is closed, not the site's others
        _args, body = select_location(public, path)
        assert directive(body, "proxy_pass") == ["http://kece_web"]
    internal = server_listening_on(8443)
    _args, body = select_location(internal, metrics_path)
    assert directive(body, "proxy_pass") == ["http://kece_web"]
    # Only so that Prometheus sees the node API's own processes answer.
    _args, body = select_location(internal, metrics_path + "/node-api")
    assert directive(body, "proxy_pass") == ["http://kece_node_api/metrics"]


def nginx_size(value: str) -> int:
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", value)
    assert match, value
    return int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[match.group(2).lower()]


def test_proxy_and_readme_hold_bodies_to_the_servers_one_limit():
    """The server refuses any body over DATA_UPLOAD_MAX_MEMORY_SIZE on every path
    (kece/bodies.py); the proxy refuses the same bodies, in the same envelope, on both
    listeners, and the README states that figure."""
    from django.conf import settings

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    (http,) = children(parse_nginx(NGINX_CONF.read_text()), "http")
    assert directive(http[2], "client_max_body_size") is None, "one limit per listener, not a default above it"
    for port in (443, 8443):
        server = server_listening_on(port)
        assert nginx_size(directive(server, "client_max_body_size")[0]) == limit, f"listener {port}"
        page, target = directive(server, "error_page")
        assert page == "413"
        (named,) = [body for _, args, body in children(server, "location") if args == [target]]
        status, text = directive(named, "return")
        assert status == "413" and directive(named, "default_type") == ["application/json"]
        envelope = json.loads(text)
        assert envelope["error"] == "too_large" and str(limit) in envelope["detail"]
    readme = (REPO / "README.md").read_text()
    assert set(re.findall(r"held to\s+(\d+)\s+MiB", readme)) == {str(limit // 2 ** 20)}


def test_proxy_hands_the_consoles_socket_upgrade_on(compose):
    import inspect

    import uvicorn

    _args, socket = select_location(server_listening_on(443), "/ws/admin/judgers")
    assert directive(socket, "proxy_pass") == ["http://kece_web"]
    assert directive(socket, "proxy_http_version") == ["1.1"]
    headers = {args[0].lower(): args[1] for _, args, _ in children(socket, "proxy_set_header")}
    assert headers["upgrade"] == "$http_upgrade" and headers["connection"].lower() == "upgrade"
    # A proxy_set_header in a location replaces every inherited one: the others are repeated.
    assert (headers["host"], headers["x-forwarded-proto"], headers["x-forwarded-for"]) == \
        ("$host", "https", "$remote_addr")
    # uvicorn pings an open socket at this interval (the web service keeps the default), so
    # an idle console is never silent for as long as nginx waits.
    web = command_argv(compose["services"]["web"]["command"])
    assert not any(arg.startswith("--ws-ping") for arg in web)
    ping = inspect.signature(uvicorn.Config).parameters["ws_ping_interval"].default
    assert seconds(directive(socket, "proxy_read_timeout")[0]) > 2 * ping


def test_proxy_files_and_secrets_line_up(compose):
    proxy = compose["services"]["proxy"]
    assert any(str(v).startswith("./nginx.conf:/etc/nginx/nginx.conf") for v in proxy["volumes"])
    mounted = {f"/run/secrets/{s if isinstance(s, str) else s.get('target', s['source'])}" for s in proxy["secrets"]}
    for server in servers():
        for name in ("ssl_certificate", "ssl_certificate_key"):
            value = directive(server, name)
            if value:
                assert value[0] in mounted, f"nginx.conf reads {value[0]}, which the proxy does not mount"
    # Static files: collectstatic writes the volume the proxy serves from.
    _args, static = select_location(server_listening_on(443), "/static/app.css")
    alias = directive(static, "alias")[0].rstrip("/")
    (static_volume,) = [v.split(":")[0] for v in proxy["volumes"] if v.split(":")[1] == alias]
    migrate_targets = {v.split(":")[0]: v.split(":")[1] for v in compose["services"]["migrate"]["volumes"]}
    assert migrate_targets.get(static_volume) == "/app/var/static"


# --- scripts -------------------------------------------------------------------------------

def test_entrypoint_reads_file_variables(tmp_path):
    url = tmp_path / "url"
    url.write_text("mysql://kece:p%40ss@mysql:3306/kece\n")
    show = [sys.executable, "-c", "import os; print(os.environ['DATABASE_URL'], 'DATABASE_URL_FILE' in os.environ)"]
    ok = subprocess.run(["sh", str(ENTRYPOINT), *show], env={"PATH": os.environ["PATH"], "DATABASE_URL_FILE": str(url)},
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and ok.stdout.split() == ["mysql://kece:p%40ss@mysql:3306/kece", "False"]
    both = subprocess.run(["sh", str(ENTRYPOINT), "true"], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "DATABASE_URL": "x", "DATABASE_URL_FILE": str(url)})
    assert both.returncode == 2
    missing = subprocess.run(["sh", str(ENTRYPOINT), "true"], capture_output=True, text=True, timeout=30,
                             env={"PATH": os.environ["PATH"], "JUDGE_MYSQL_URL_FILE": str(tmp_path / "nope")})
    assert missing.returncode == 2


def test_entrypoint_holds_an_agent_back_until_its_join_code_is_written(tmp_path):
    (tmp_path / "node_agent").mkdir()
    (tmp_path / "node_agent" / "__main__.py").write_text("print('agent started')\n")
    credential = tmp_path / "credential"
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "JUDGE_CREDENTIAL_FILE": str(credential)}
    agent = subprocess.Popen(["sh", str(ENTRYPOINT), "python", "-m", "node_agent"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            agent.wait(timeout=3)
        credential.write_text("join-code\n")
        out, err = agent.communicate(timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert agent.returncode == 0 and out.strip() == "agent started"
    assert "waiting for the join code" in err
    # Any other command runs at once, credential or not.
    other = subprocess.run(["sh", str(ENTRYPOINT), "true"], env={**env, "JUDGE_CREDENTIAL_FILE": str(tmp_path / "none")},
                           timeout=30)
    assert other.returncode == 0


def test_agent_requirements_follow_pyproject():
    import tomllib

    pins = {re.split(r"[\[=]", d)[0].lower(): d
            for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    for pool in ("cpp", "java", "python", "mysql", "arkts"):
        out = subprocess.run([sys.executable, str(DEPLOY / "agent-requirements.py"), pool, str(REPO / "pyproject.toml")],
                             capture_output=True, text=True, timeout=30, check=True).stdout.split()
        expected = [pins["requests"], pins["urllib3"], pins["prometheus-client"], pins["python-json-logger"],
                    pins["pyseccomp"]]
        if pool == "mysql":
            expected.append(pins["mysqlclient"])
        assert sorted(out) == sorted(expected)


def test_make_secrets_makes_every_secret(made_secrets):
    compose = load_compose(made_secrets)
    for name, secret in compose["secrets"].items():
        path = (DEPLOY / secret["file"]).resolve()
        assert path.is_file() and path.stat().st_size > 0, f"secret {name}: {path} was not made"
    secrets_dir = Path(made_secrets["KECE_SECRETS_DIR"])
    read = lambda name: (secrets_dir / name).read_text().strip()  # noqa: E731
    database = urlsplit(read("database_url"))
    assert (database.scheme, database.hostname, database.port, database.username, database.password, database.path) \
        == ("mysql", "mysql", 3306, "kece", read("mysql_password"), "/kece")
    mysql_env = compose["services"]["mysql"]["environment"]
    assert (mysql_env["MYSQL_USER"], mysql_env["MYSQL_DATABASE"]) == ("kece", "kece")
    judge = urlsplit(read("judge_mysql_url"))
    assert (judge.hostname, judge.username, judge.password) == ("judge-mysql", "root", read("judge_mysql_root_password"))
    # Each agent's certificate is signed by the CA the probes trust, for the agent's host name.
    certs = Path(made_secrets["KECE_CERTS_DIR"])
    for host in ["kece-internal"] + [f"agent-{p}" for p in ("cpp", "java", "python", "mysql", "arkts")]:
        check = subprocess.run(["openssl", "verify", "-verify_hostname", host, "-CAfile", str(certs / "internal-ca.pem"),
                                str(certs / f"{host}.pem")], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
    # Run again: nothing is overwritten.
    before = read("secret_key")
    subprocess.run(["sh", str(DEPLOY / "make-secrets.sh"), BASE_ENV["KECE_DOMAIN"]], check=True, timeout=120,
                   env={"PATH": os.environ["PATH"], **made_secrets}, capture_output=True)
    assert read("secret_key") == before


def test_server_settings_load_in_production_mode(made_secrets, tmp_path):
    """`manage.py check --deploy` with the compose environment, through the entry point."""
    web = load_compose(made_secrets)["services"]["web"]
    secret_files = {s if isinstance(s, str) else s["source"]: s for s in web["secrets"]}
    secrets = load_compose(made_secrets)["secrets"]
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "PYTHONDONTWRITEBYTECODE": "1"}
    for var, value in environment(web).items():
        if value.startswith("/run/secrets/"):
            target = value.removeprefix("/run/secrets/")
            source = next(name for name, s in secret_files.items()
                          if (s if isinstance(s, str) else s.get("target", s["source"])) == target)
            value = str((DEPLOY / secrets[source]["file"]).resolve())
        env[var] = value
    env["KECE_ARTIFACT_ROOT"] = str(tmp_path / "artifacts")
    result = subprocess.run(["sh", str(ENTRYPOINT), sys.executable, "manage.py", "check", "--deploy",
                             "--fail-level", "ERROR"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # Production: MySQL and Redis in use, so none of the embedded-mode warnings.
    assert "kece.W001" not in result.stderr + result.stdout
    assert "kece.W002" not in result.stderr + result.stdout
    # Session and CSRF cookies are marked Secure.
    assert "security.W012" not in result.stderr + result.stdout
    assert "security.W016" not in result.stderr + result.stdout


def _docker_compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def test_docker_compose_config_accepts_the_file(made_secrets):
    if not _docker_compose_available():
        pytest.skip("the docker compose plugin is not installed")
    env = {**os.environ, **BASE_ENV, **made_secrets}
    result = subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "--profile", "agents", "config", "--quiet"],
                            cwd=DEPLOY, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    remote = subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "-f", str(DEPLOY / "remote-judges.yaml"),
                             "config", "--format", "json"], cwd=DEPLOY, capture_output=True, text=True, timeout=120,
                            env={**env, "KECE_INTERNAL_LISTEN": "10.0.0.5:8443"})
    assert remote.returncode == 0, remote.stderr
    services = json.loads(remote.stdout)["services"]
    assert {"data", "judge", "judge-remote"} <= set(services["probe-worker"]["networks"])


def test_every_setting_of_the_compose_file_is_in_its_env_example_with_its_default():
    """`.env.example` is the list of what the file set (and its override for remote judges) reads from `.env`: an operator who
    copies it sees every setting, commented out at the default the file applies."""
    files = COMPOSE_FILE.read_text() + (DEPLOY / "remote-judges.yaml").read_text()
    used = dict(re.findall(r"\$\{(KECE_[A-Z_]+)(?::[-?]([^}]*))?\}", files))
    example = dict(re.findall(r"^#?(KECE_[A-Z_]+)=(.*)$", (DEPLOY / ".env.example").read_text(), re.M))
    assert set(used) == set(example)
    for name, default in used.items():
        if not default.startswith("set "):  # a required one (`:?`): the example gives a value
            assert example[name] == default, name


def test_remote_judges_are_probed_over_a_network_that_leaves_the_host_and_reach_a_private_listener():
    """compose.yaml's networks are all internal: a judge machine elsewhere joins but its
    connectivity check can reach nothing off the host. The override lets the probes (and
    web's resolution at registration) out and publishes the internal listener on the address
    given, never on all of them."""
    override = yaml.safe_load((DEPLOY / "remote-judges.yaml").read_text())
    compose = load_compose()
    added = {name: set(service["networks"]) for name, service in override["services"].items() if "networks" in service}
    assert added == {"probe-worker": {"judge-remote"}, "web": {"judge-remote"}}
    assert not override["networks"]["judge-remote"].get("internal")
    assert all(compose["networks"][name].get("internal") for name in compose["networks"] if name != "edge")
    (published,) = override["services"]["proxy"]["ports"]
    with pytest.raises(KeyError):
        interpolate(published, BASE_ENV)  # no default: the operator names the private address
    assert interpolate(published, {**BASE_ENV, "KECE_INTERNAL_LISTEN": "10.0.0.5:8443"}) == "10.0.0.5:8443:8443"
    example = (DEPLOY / ".env.example").read_text()
    assert "#KECE_INTERNAL_LISTEN=" in example


def test_the_metrics_tokens_steps_give_prometheus_the_file_its_scrapes_read(tmp_path):
    """Following "Monitoring" (uncomment the secret, its line under prometheus, and both
    jobs' authorization) gives each scrape the token's file at the path it reads."""
    uncommented = re.sub(r"(?m)^(\s*)# (- metrics_token|metrics_token:|  file: \$\{KECE_SECRETS_DIR)", r"\1\2",
                         COMPOSE_FILE.read_text())
    compose = interpolate(yaml.safe_load(uncommented), BASE_ENV)
    assert compose["secrets"]["metrics_token"]["file"].endswith("/metrics_token")
    mounted = {s if isinstance(s, str) else s.get("target", s["source"]) for s in compose["services"]["prometheus"]["secrets"]}
    assert "metrics_token" in mounted
    config = yaml.safe_load(re.sub(r"(?m)^(\s*)# (authorization:|  credentials_file:)", r"\1\2",
                                   (DEPLOY.parent / "prometheus" / "prometheus.yml").read_text()))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for name in ("kece", "kece-node-api"):
        assert jobs[name]["authorization"]["credentials_file"] == "/run/secrets/metrics_token"
