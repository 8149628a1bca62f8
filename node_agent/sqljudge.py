"""The mysql pool: SQL submissions on a dedicated judge MySQL/MariaDB.

Per job, through the administrative connection (``JUDGE_MYSQL_URL``):

1. create a temporary database and a restricted user that may touch only that database,
   both named ``kece_judge_n<node>_j<job>_e<lease>_<random>`` so a leftover can be traced
   and swept (at start, every name with this node's prefix is dropped);
2. load the problem's schema and seed into it as admin;
3. query problems: run the reference answer as admin, then the submission as the
   restricted user, and compare the two result sets;
   DML problems (``check`` given): run the submission as the restricted user, then the
   check statement; run schema, seed, answer and check in a second temporary database, and
   compare the two check results;
4. drop everything, whatever happened.

The submission's time is bounded twice: the server-side statement limit
(``max_statement_time`` on MariaDB, ``max_execution_time`` on MySQL, which a submission
could reset) and a watchdog that kills the restricted connection from the admin side.
Syntax error 1064 is CE; running out of the session's memory (an in-memory table larger
than the memory limit, out of sort memory) MLE; other SQL errors RE; a timeout TLE; a
result larger than the output limit OLE; a different result WA.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field

import MySQLdb
import MySQLdb.cursors
from MySQLdb.constants import CLIENT

from . import log, verdicts
from .config import MysqlTarget
from .jobs import InfraError, JobCancelled, JobContext

logger = log.get("sqljudge")

PREFIX = "kece_judge_"
TIMEOUT_CODES = {1969, 3024, 1317, 2013, 2006}  # statement timeout (MariaDB, MySQL), killed, gone
SYNTAX_ERROR = 1064
# Out of memory, out of sort memory, out of resources, in-memory table full: the memory
# limit is applied to the session's in-memory tables (max_heap_table_size, tmp_table_size).
MEMORY_CODES = {1037, 1038, 1041, 1114}
USER_PRIVILEGES = (
    "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE VIEW, SHOW VIEW, "
    "CREATE TEMPORARY TABLES"
)


class Outcome:
    def __init__(self, verdict: str | None = None, rows: list | None = None, message: str = "", time_ms: int = 0):
        self.verdict = verdict
        self.rows = rows
        self.message = message
        self.time_ms = time_ms


def _quote_ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"unexpected identifier {name!r}")
    return f"`{name}`"


def normalise(rows: list[tuple]) -> list[tuple]:
    def value(v):
        if v is None:
            return None
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).decode("utf-8", "replace")
        return str(v)

    return [tuple(value(v) for v in row) for row in rows]


def results_equal(actual: list[tuple], expected: list[tuple], ordered: bool) -> bool:
    a, b = normalise(actual), normalise(expected)
    if ordered:
        return a == b

    def key(row):
        return tuple((v is None, v or "") for v in row)

    return sorted(a, key=key) == sorted(b, key=key)


class JudgeDb:
    def __init__(self, target: MysqlTarget):
        self.target = target
        self.node_id: int | None = None
        self._flavor: str | None = None

    @property
    def prefix(self) -> str:
        return f"{PREFIX}n{self.node_id}_"

    def connect(self, user: str | None = None, password: str | None = None, db: str | None = None,
                multi: bool = False):
        kwargs = dict(host=self.target.host, port=self.target.port, user=user or self.target.user,
                      passwd=self.target.password if user is None else password, connect_timeout=10,
                      autocommit=True, charset="utf8mb4")
        if db:
            kwargs["db"] = db
        if multi:
            kwargs["client_flag"] = CLIENT.MULTI_STATEMENTS
        return MySQLdb.connect(**kwargs)

    def admin(self, db: str | None = None, multi: bool = False):
        try:
            return self.connect(db=db, multi=multi)
        except MySQLdb.OperationalError as exc:
            raise InfraError("judge_db_unavailable", f"judge MySQL unreachable: {exc.args}") from None

    def flavor(self) -> str:
        if self._flavor is None:
            conn = self.admin()
            try:
                self._flavor = "mariadb" if "mariadb" in conn.get_server_info().lower() else "mysql"
            finally:
                conn.close()
        return self._flavor

    def ping(self) -> bool:
        try:
            conn = self.connect()
            try:
                cur = conn.cursor()
                cur.execute("SELECT 1")
                return cur.fetchone() == (1,)
            finally:
                conn.close()
        except MySQLdb.Error:
            return False

    def user_name(self, tag: str) -> str:
        name = f"{self.prefix}{tag}"
        # MySQL 8 allows 32 characters in a user name (MariaDB 80): keep the node prefix,
        # which the sweep needs, and replace the rest by a digest.
        if len(name) > 32 and self.flavor() == "mysql":
            name = self.prefix + hashlib.sha256(tag.encode()).hexdigest()[: 31 - len(self.prefix)]
        return name

    # -- temporary resources -----------------------------------------------------------

    def create_env(self, tag: str) -> "TempEnv":
        env = TempEnv(db=f"{self.prefix}{tag}", user=self.user_name(tag), password=secrets.token_urlsafe(18))
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE DATABASE {_quote_ident(env.db)} CHARACTER SET utf8mb4")
            env.created_db = True
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s WITH MAX_USER_CONNECTIONS 2",
                        (env.user, env.password))
            env.created_user = True
            cur.execute(f"GRANT {USER_PRIVILEGES} ON {_quote_ident(env.db)}.* TO %s@'%%'", (env.user,))
        except MySQLdb.Error as exc:
            conn.close()
            self.drop_env(env)
            raise InfraError("judge_db_error", f"cannot create temporary database/user: {exc.args}") from None
        conn.close()
        return env

    def create_database(self, name: str) -> None:
        conn = self.admin()
        try:
            conn.cursor().execute(f"CREATE DATABASE {_quote_ident(name)} CHARACTER SET utf8mb4")
        finally:
            conn.close()

    def drop_env(self, env: "TempEnv") -> None:
        self.drop(databases=[env.db] + env.extra_dbs, users=[env.user])

    def drop(self, databases: list[str], users: list[str]) -> None:
        conn = self.admin()
        try:
            cur = conn.cursor()
            # DROP USER leaves open sessions running: kill them first.
            if users:
                cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER IN ("
                            + ",".join(["%s"] * len(users)) + ")", users)
                for (pid,) in cur.fetchall():
                    try:
                        cur.execute(f"KILL {int(pid)}")
                    except MySQLdb.Error:
                        pass
            for user in users:
                cur.execute("DROP USER IF EXISTS %s@'%%'", (user,))
            for db in databases:
                cur.execute(f"DROP DATABASE IF EXISTS {_quote_ident(db)}")
        finally:
            conn.close()

    def leftovers(self) -> tuple[list[str], list[str]]:
        like = self.prefix.replace("_", "\\_") + "%"
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE %s", (like,))
            dbs = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT DISTINCT User FROM mysql.user WHERE User LIKE %s", (like,))
            users = [r[0].decode() if isinstance(r[0], bytes) else r[0] for r in cur.fetchall()]
            return dbs, users
        finally:
            conn.close()

    def sweep(self) -> tuple[list[str], list[str]]:
        dbs, users = self.leftovers()
        if dbs or users:
            self.drop(dbs, users)
        return dbs, users

    # -- running SQL -------------------------------------------------------------------

    def run_admin_script(self, db: str, script: str) -> list[tuple] | None:
        """Run statements as admin; return the last result set (None if there was none)."""
        conn = self.admin(db=db, multi=True)
        try:
            cur = conn.cursor()
            cur.execute(script)
            last = None
            while True:
                if cur.description is not None:
                    last = list(cur.fetchall())
                if cur.nextset() is None:
                    break
            return last
        finally:
            conn.close()

    def run_as_user(self, env: "TempEnv", script: str, *, time_limit_ms: int, output_limit_bytes: int,
                    cancel: threading.Event, memory_limit_mb: int = 256) -> Outcome:
        try:
            conn = self.connect(user=env.user, password=env.password, db=env.db, multi=True)
        except MySQLdb.OperationalError as exc:
            raise InfraError("judge_db_unavailable", f"restricted user cannot connect: {exc.args}") from None
        fired = threading.Event()
        done = threading.Event()
        thread_id = conn.thread_id()

        def watchdog():
            deadline = time.monotonic() + time_limit_ms / 1000 + 0.5
            while not done.wait(0.05):
                if time.monotonic() >= deadline or cancel.is_set():
                    fired.set()
                    try:
                        admin = self.admin()
                        try:
                            admin.cursor().execute(f"KILL {int(thread_id)}")
                        finally:
                            admin.close()
                    except (MySQLdb.Error, InfraError):
                        pass
                    return

        start = time.monotonic()
        dog = threading.Thread(target=watchdog, name=f"sql-watchdog-{thread_id}", daemon=True)
        try:
            cur = conn.cursor(MySQLdb.cursors.SSCursor)
            seconds = max(0.001, time_limit_ms / 1000)
            if self.flavor() == "mariadb":
                cur.execute(f"SET SESSION max_statement_time = {seconds:.3f}")
            else:
                cur.execute(f"SET SESSION max_execution_time = {int(time_limit_ms)}")
            heap = max(16 * 1024, int(memory_limit_mb) * 1024 * 1024)
            cur.execute(f"SET SESSION max_heap_table_size = {heap}, tmp_table_size = {heap}")
            dog.start()
            start = time.monotonic()
            cur.execute(script)
            last = None
            while True:
                if cur.description is not None:
                    rows, size = [], 0
                    while True:
                        batch = cur.fetchmany(1000)
                        if not batch:
                            break
                        for row in batch:
                            size += sum(len(str(v)) + 1 for v in row)
                        if size > output_limit_bytes:
                            return Outcome("OLE", time_ms=_ms(start))
                        rows.extend(batch)
                    last = rows
                if cur.nextset() is None:
                    break
            elapsed = _ms(start)
            if fired.is_set() or elapsed > time_limit_ms:
                return Outcome("TLE", time_ms=elapsed)
            return Outcome(None, rows=last, time_ms=elapsed)
        except MySQLdb.Error as exc:
            elapsed = _ms(start)
            if cancel.is_set():
                raise JobCancelled() from None
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
            if fired.is_set() or code in TIMEOUT_CODES:
                return Outcome("TLE", message=message, time_ms=max(elapsed, time_limit_ms))
            if code == SYNTAX_ERROR:
                return Outcome("CE", message=f"ERROR {code}: {message}", time_ms=elapsed)
            if code in MEMORY_CODES:
                return Outcome("MLE", message=f"ERROR {code}: {message}", time_ms=elapsed)
            return Outcome("RE", message=f"ERROR {code}: {message}", time_ms=elapsed)
        finally:
            done.set()
            try:
                conn.close()
            except MySQLdb.Error:
                pass


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


@dataclass
class TempEnv:
    db: str
    user: str
    password: str
    created_db: bool = False
    created_user: bool = False
    extra_dbs: list[str] = field(default_factory=list)


def _text(ctx: JobContext, entry: dict | None) -> str | None:
    if not entry:
        return None
    return ctx.artifact(entry).read_bytes().decode("utf-8", "replace")


def _setup(judge_db: JudgeDb, db: str, schema: str | None, seed: str | None) -> None:
    try:
        for script in (schema, seed):
            if script and script.strip():
                judge_db.run_admin_script(db, script)
    except MySQLdb.Error as exc:
        raise InfraError("sql_setup_failed", f"schema/seed failed on the judge MySQL: {exc.args}") from None


def _reference(judge_db: JudgeDb, db: str, script: str) -> list[tuple]:
    try:
        rows = judge_db.run_admin_script(db, script)
    except MySQLdb.Error as exc:
        raise InfraError("sql_reference_failed", f"reference statement failed: {exc.args}") from None
    return rows or []


def judge_sql(ctx: JobContext, judge_db: JudgeDb) -> dict:
    job = ctx.job
    sql = job.get("sql") or {}
    limits = job["limits"]
    ctx.progress("COMPILING", None)
    submission = _text(ctx, job["source"]) or ""
    schema, seed = _text(ctx, sql.get("schema")), _text(ctx, sql.get("seed"))
    answer, check = _text(ctx, sql.get("answer")), _text(ctx, sql.get("check"))
    if answer is None:
        raise InfraError("artifact_missing", "SQL job has no reference answer")
    ordered = bool(sql.get("ordered"))
    tag = f"j{ctx.job_id}_e{ctx.lease_epoch}_{secrets.token_hex(3)}"
    ctx.check()
    env = judge_db.create_env(tag)
    try:
        _setup(judge_db, env.db, schema, seed)
        if check is None:
            expected = _reference(judge_db, env.db, answer)
        else:
            ref_db = f"{env.db}_ref"
            env.extra_dbs.append(ref_db)
            judge_db.create_database(ref_db)
            _setup(judge_db, ref_db, schema, seed)
            _reference(judge_db, ref_db, answer)
            expected = _reference(judge_db, ref_db, check)
        ctx.check()
        ctx.progress("JUDGING", 1)
        outcome = judge_db.run_as_user(
            env, submission, time_limit_ms=int(limits["timeLimitMs"]),
            output_limit_bytes=int(limits["outputLimitKb"]) * 1024, cancel=ctx.cancel,
            memory_limit_mb=int(limits.get("memoryLimitMb") or 256),
        )
        if outcome.verdict is None:
            actual = outcome.rows if check is None else _reference(judge_db, env.db, check)
            if check is None and actual is None:
                outcome.verdict = "WA"  # a query problem answered without a result set
            else:
                outcome.verdict = "AC" if results_equal(actual, expected, ordered) else "WA"
    finally:
        try:
            judge_db.drop_env(env)
        except (MySQLdb.Error, InfraError) as exc:
            ctx.log.warning("temporary database cleanup failed; the next sweep will retry", error=str(exc))
    ctx.log.info("sql judged", verdict=outcome.verdict, time_ms=outcome.time_ms)
    if outcome.verdict == "CE":
        body = verdicts.compile_error(ctx.lease_epoch, verdicts.cut_compile_output(outcome.message.encode()))
        body["cases"] = [verdicts.case_entry(1, "CE", 0, 0, 100)]
        return body
    case = verdicts.case_entry(1, outcome.verdict, outcome.time_ms, 0, 100)
    body = verdicts.judged(ctx.lease_epoch, [case])
    if outcome.message:
        body["compileOutput"] = verdicts.cut_compile_output(outcome.message.encode())
    return body
