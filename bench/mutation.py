"""Mutation testing of the node path's guards: claim, leases, settle, the lock helper and
node authentication. Each guard removed or bent (mutmut's mutants) must fail a test.

    python bench/mutation.py                    # all five modules, then the scores
    python bench/mutation.py claim auth         # some of them
    python bench/mutation.py --report           # only print the scores of the last runs
    python bench/mutation.py --survivors settle # and show each surviving mutant's diff

It runs against a MariaDB test database of its own (`test_kece_mutation`, from
`KECE_MUTATION_DATABASE_URL`) and a Redis database of its own (`KECE_MUTATION_REDIS_URL`,
db 15 by default), with the lock-order checker on, one mutant at a time. Each module's
mutants run the test modules `MODULES` names for it (within the selection of
`[tool.mutmut]` in pyproject.toml). Results are kept in `mutants/` (git-ignored): a second
run tests the mutants without a result and, again, those that survived before.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each module with the test modules that cover it: a mutant runs only those of them that
# execute the function it changes (mutmut's own coverage of the clean run), and stops at
# the first failure. The rest of the suite would only make survivors slower.
_NODE_PATH = ["tests/judging/test_job_settle.py", "tests/judging/test_query_counts.py", "tests/nodes/test_checks.py"]
MODULES = {
    "claim": ("judging/services/claim.py", [
        "tests/judging/test_claim_refusals.py", "tests/judging/test_claim_concurrency.py",
        "tests/judging/test_settle_refusals.py", *_NODE_PATH, "tests/nodes/test_drain_node.py"]),
    "leases": ("judging/services/leases.py", [
        "tests/judging/test_lease_refusals.py", "tests/judging/test_reaper_race.py", *_NODE_PATH,
        "tests/api/test_admin_api.py"]),
    "settle": ("judging/services/settle.py", [
        "tests/judging/test_settle_refusals.py", "tests/judging/test_settlement_events.py", *_NODE_PATH,
        "tests/api/test_node_auth.py"]),
    "locking": ("judging/locking.py", [
        "tests/judging/test_locking.py", "tests/judging/test_lock_refusals.py",
        "tests/judging/test_claim_concurrency.py", "tests/judging/test_settlement_events.py", "tests/judging/test_reaper_race.py", *_NODE_PATH]),
    "auth": ("judging/auth.py", [
        "tests/api/test_node_auth.py", "tests/api/test_artifact_refusals.py", "tests/api/test_permissions.py",
        "tests/api/test_join.py", "tests/nodes/test_checks.py"]),
}
KILLED = {1, 3}  # a test failed, or pytest itself broke on the mutant
SURVIVED = 0
# Not counted either way: 33 "no test executes it", 34 skipped.
UNTESTED = {33, 34}


def environment() -> dict:
    env = dict(os.environ)
    env["DATABASE_URL"] = os.environ.get("KECE_MUTATION_DATABASE_URL", "mysql://root:@127.0.0.1:3306/kece_mutation")
    env["REDIS_URL"] = os.environ.get("KECE_MUTATION_REDIS_URL", "redis://127.0.0.1:6379/15")
    env["KECE_REQUIRE_SERVICES"] = "1"
    env["KECE_LOCK_ORDER_CHECK"] = "1"
    env.setdefault("KECE_LOG_LEVEL", "WARNING")
    # mutmut runs the tests in its own process (forking one per mutant): it must find the
    # project's interpreter and packages.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def glob_of(path: str) -> str:
    """mutmut names a mutant `<dotted module>.<mangled function>__mutmut_<n>`."""
    return path.removesuffix(".py").replace("/", ".") + ".*"


def run(names: list[str], env: dict) -> None:
    mutmut = [str(Path(sys.executable).parent / "mutmut"), "run", "--max-children", "1"]
    started = time.monotonic()
    for name in names:
        module_started = time.monotonic()
        print(f"== {name}: {MODULES[name][0]}", flush=True)
        # mutmut keeps a result once it has one; tests added since may kill what survived.
        path, tests = MODULES[name]
        env = {**env, "KECE_MUTATION_TESTS": ",".join(tests)}
        survived_before = [k for k, c in results(path).items() if c == SURVIVED]
        subprocess.run([*mutmut, glob_of(path)], cwd=ROOT, env=env, check=False)
        if survived_before:
            print(f"== {name}: {len(survived_before)} earlier survivors again", flush=True)
            subprocess.run([*mutmut, *survived_before], cwd=ROOT, env=env, check=False)
        print(f"== {name}: {time.monotonic() - module_started:.0f} s", flush=True)
    print(f"== all: {time.monotonic() - started:.0f} s", flush=True)


def results(path: str) -> dict[str, int | None]:
    meta = ROOT / "mutants" / (path + ".meta")
    if not meta.exists():
        return {}
    return json.loads(meta.read_text())["exit_code_by_key"]


def report(names: list[str], *, survivors: bool) -> float:
    total_killed = total_counted = 0
    print(f"{'module':<30} {'killed':>7} {'total':>6} {'score':>7}  other")
    for name in names:
        codes = results(MODULES[name][0])
        killed = sum(1 for c in codes.values() if c in KILLED)
        survived = sorted(k for k, c in codes.items() if c == SURVIVED)
        other = {k: c for k, c in codes.items() if c not in KILLED and c != SURVIVED}
        counted = killed + len(survived) + sum(1 for c in other.values() if c not in UNTESTED)
        total_killed += killed
        total_counted += counted
        score = f"{100 * killed / counted:.1f}%" if counted else "-"
        notes = ", ".join(f"{c}: {n}" for c, n in _tally(other).items())
        print(f"{MODULES[name][0]:<30} {killed:>7} {counted:>6} {score:>7}  {notes}")
        if survivors:
            mutmut = Path(sys.executable).parent / "mutmut"
            for key in survived:
                print(f"--- survived: {key}", flush=True)
                subprocess.run([str(mutmut), "show", key], cwd=ROOT, check=False)
    overall = 100 * total_killed / total_counted if total_counted else 0.0
    print(f"{'total':<30} {total_killed:>7} {total_counted:>6} {overall:>6.1f}%")
    return overall


def _tally(other: dict) -> dict:
    labels = {None: "not run", 33: "no tests", 34: "skipped", 35: "suspicious", 36: "timeout", 24: "timeout",
              -24: "timeout", 152: "timeout"}
    tally = {}
    for code in other.values():
        label = labels.get(code, f"exit {code}")
        tally[label] = tally.get(label, 0) + 1
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", metavar="module", help=f"of {', '.join(MODULES)}; default: all")
    parser.add_argument("--report", action="store_true", help="print the scores of the last runs only")
    parser.add_argument("--survivors", action="store_true", help="show the diff of every surviving mutant")
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    unknown = set(names) - set(MODULES)
    if unknown:
        parser.error(f"unknown module(s): {', '.join(sorted(unknown))}")
    if not args.report:
        env = environment()
        run(names, env)
    report(names, survivors=args.survivors)


if __name__ == "__main__":
    main()
