"""The five pools, their runtime specs, and routing from problem kind + language to a pool.

A pool is one runtime. A job carries the runtime spec of its pool at submit time and is only
given to a node that reported exactly that spec (API.md, "Runtime specs").
"""

from dataclasses import dataclass, field

from django.utils.translation import gettext_noop


class UnsupportedLanguage(Exception):
    """The language is not a pool, or not one this problem accepts."""


@dataclass(frozen=True)
class RuntimeSpec:
    id: str
    pool: str
    description: str
    compile: tuple[str, ...] = ()
    run: tuple[str, ...] = ()
    source_name: str = ""

    def as_snapshot(self) -> dict:
        return {
            "id": self.id,
            "pool": self.pool,
            "description": self.description,
            "compile": list(self.compile),
            "run": list(self.run),
            "sourceName": self.source_name,
        }


@dataclass(frozen=True)
class Pool:
    name: str
    label: str
    problem_kind: str
    spec: RuntimeSpec = field(repr=False)


ALGO = "ALGO"
SQL = "SQL"

# A runtime's description is marked for the catalogue but kept in English here: the API's
# `runtimeLabel` says it as it is, a page in its reader's language (`{% translate %}`).
POOLS: dict[str, Pool] = {
    pool.name: pool
    for pool in (
        Pool(
            "cpp",
            "C++",
            ALGO,
            RuntimeSpec(
                "cpp-r1", "cpp", gettext_noop("GNU C++17, -O2"),
                compile=("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp"),
                run=("./main",), source_name="main.cpp",
            ),
        ),
        Pool(
            "java",
            "Java",
            ALGO,
            RuntimeSpec(
                "java-r1", "java", gettext_noop("OpenJDK 17, class Main"),
                compile=("javac", "-encoding", "UTF-8", "Main.java"),
                run=("java", "-Xss64m", "Main"), source_name="Main.java",
            ),
        ),
        Pool(
            "python",
            "Python",
            ALGO,
            RuntimeSpec("python-r1", "python", gettext_noop("CPython 3"), run=("python3", "main.py"), source_name="main.py"),
        ),
        Pool(
            "mysql",
            "MySQL",
            SQL,
            RuntimeSpec("mysql-r1", "mysql", gettext_noop("MySQL-compatible judge database"), source_name="answer.sql"),
        ),
        Pool(
            "arkts",
            "ArkTS",
            ALGO,
            RuntimeSpec(
                "arkts-r1", "arkts", gettext_noop("ArkTS (strict TypeScript stand-in on Node.js unless the node's spec says otherwise)"),
                compile=("tsc", "--strict", "main.ts"), run=("node", "main.js"), source_name="main.ts",
            ),
        ),
    )
}

POOL_NAMES: tuple[str, ...] = tuple(POOLS)
POOL_CHOICES = [(pool.name, pool.label) for pool in POOLS.values()]
ALGO_LANGUAGES = tuple(name for name, pool in POOLS.items() if pool.problem_kind == ALGO)


def pool_for(*, problem_kind: str, language: str, allowed_languages) -> Pool:
    """Route a submission: the pool named by `language`, if the problem kind and list allow it."""
    pool = POOLS.get(language)
    if pool is None or pool.problem_kind != problem_kind:
        expected = "mysql" if problem_kind == SQL else ", ".join(allowed_languages or ALGO_LANGUAGES)
        raise UnsupportedLanguage(f"language {language!r} is not accepted here; use one of: {expected}")
    if problem_kind == ALGO and language not in allowed_languages:
        raise UnsupportedLanguage(
            f"language {language!r} is not accepted for this problem; use one of: {', '.join(allowed_languages)}"
        )
    return pool


def runtime_spec(pool_name: str) -> RuntimeSpec:
    return POOLS[pool_name].spec
