"""The apps depend one way: `nodes` builds on `judging`, and neither imports the wiring.

`nodes` queues diagnostic jobs, releases leases and reads the job table, so it imports
`judging`. `judging` imports of `nodes` only its models — the rows it locks first (host group
→ node → submission → job) and leases to; whatever else it needs of nodes (a diagnostic job
settled, a node quarantined) it calls through the handlers `nodes` registers in
`judging.hooks` at start-up. The wiring in `kece/` (settings, urls, asgi, celery, the
scheduler and the periodic steps, the Celery tasks) may import every app; an app may use the
helpers in `kece/` that import no app back (errors, api, caches, …), never the wiring.

Every import counts, at module level or inside a function."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APPS = ("judging", "nodes", "pools")
# What judging may import of nodes.
JUDGING_MAY_USE_OF_NODES = {"nodes.models"}

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

def _imports(path: Path) -> set[str]:
    """Every module `path` imports, resolved to absolute dotted names (`from a import b`
    counts as a.b too, as b may be a module)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found

def _modules(top: str) -> dict[str, set[str]]:
    # The canary problems' programs are data for the judges, not modules of the app.
    return {_module_name(p): _imports(p) for p in sorted((REPO / top).rglob("*.py"))
            if "canary" not in p.relative_to(REPO).parts}

def _top(name: str) -> str:
    return name.split(".")[0]

def wiring_modules(kece: dict[str, set[str]]) -> set[str]:
    """The kece modules that import an app, directly or through other kece modules."""
    wiring = {m for m, imports in kece.items() if any(_top(i) in APPS for i in imports)}
    while True:
        more = {m for m, imports in kece.items() if m not in wiring and imports & wiring}
        if not more:
            return wiring
        wiring |= more

def direction_violations(modules: dict[str, dict[str, set[str]]]) -> list[str]:
    kece = modules["kece"]
    wiring = wiring_modules(kece)
    found = []
    for app in APPS:
        for module, imports in modules[app].items():
            for imported in sorted(imports):
                if app == "judging" and _top(imported) == "nodes" and imported != "nodes" and \
                        not any(imported == m or imported.startswith(m + ".") for m in JUDGING_MAY_USE_OF_NODES):
                    # `from nodes.models import X` also yields nodes.models.X: allowed above.
                    found.append(f"{module} imports {imported}: judging must not import nodes (only its models)")
                if app == "judging" and imported == "nodes":
                    found.append(f"{module} imports the nodes package: judging must not import nodes")
                if imported in wiring:
                    found.append(f"{module} imports {imported}, kece wiring that imports the apps back")
    return found

def _all_modules():
    return {top: _modules(top) for top in (*APPS, "kece")}

def test_judging_imports_nothing_of_nodes_but_its_models_and_no_app_imports_the_wiring():
    assert direction_violations(_all_modules()) == []

def test_the_wiring_is_found_through_other_kece_modules():
    # The rule must see through kece: kece.celery imports no app itself but reaches them
    # through the scheduler and the periodic steps.
    wiring = wiring_modules(_all_modules()["kece"])
    assert {"kece.urls", "kece.asgi", "kece.periodic", "kece.scheduler", "kece.celery", "kece.tasks"} <= wiring
    assert not {"kece.errors", "kece.api", "kece.caches", "kece.permissions"} & wiring

def test_a_back_import_inside_a_function_is_found():
    modules = _all_modules()
    modules["judging"]["judging.services.settle"] = modules["judging"]["judging.services.settle"] | {
        "nodes.checks", "nodes.checks.self_check_settled"}
    modules["nodes"]["nodes.tasks"] = modules["nodes"]["nodes.tasks"] | {"kece.periodic"}
    assert direction_violations(modules) == [
        "judging.services.settle imports nodes.checks: judging must not import nodes (only its models)",
        "judging.services.settle imports nodes.checks.self_check_settled: judging must not import nodes "
        "(only its models)",
        "nodes.tasks imports kece.periodic, kece wiring that imports the apps back",
    ]
