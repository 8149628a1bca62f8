"""Print the pinned Python requirements of a judge node agent for one pool.

The agent needs only `requests` (with `urllib3` 2, whose `read1` its downloads use),
`prometheus-client` (its /metrics), `python-json-logger` (its log lines) and `pyseccomp` (its
runs' system call filter), and `mysqlclient` for the mysql pool (node_agent/README.md).
Their versions are the ones pinned in pyproject.toml, so the agent image and the server
never drift apart. Usage: python agent-requirements.py POOL [path/to/pyproject.toml]
"""

import re
import sys
import tomllib

POOLS = ("cpp", "java", "python", "mysql", "arkts")


def requirements(pool: str, pyproject: str) -> list[str]:
    if pool not in POOLS:
        raise SystemExit(f"agent-requirements: unknown pool {pool!r}; one of {', '.join(POOLS)}")
    wanted = {"requests", "urllib3", "prometheus-client", "python-json-logger", "pyseccomp"} | (
        {"mysqlclient"} if pool == "mysql" else set())
    with open(pyproject, "rb") as fh:
        dependencies = tomllib.load(fh)["project"]["dependencies"]
    found = {}
    for dependency in dependencies:
        name = re.split(r"[\[=<>!~; ]", dependency, maxsplit=1)[0].lower()
        if name in wanted:
            if "==" not in dependency:
                raise SystemExit(f"agent-requirements: {dependency!r} is not pinned in {pyproject}")
            found[name] = dependency
    missing = wanted - found.keys()
    if missing:
        raise SystemExit(f"agent-requirements: {', '.join(sorted(missing))} not in {pyproject}")
    return [found[name] for name in sorted(found)]


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__.strip().splitlines()[-1])
    print("\n".join(requirements(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "pyproject.toml")))
