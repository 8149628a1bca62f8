"""The mysql pool: SQL submissions on a dedicated judge MySQL/MariaDB.

Per job, through the administrative connection (``JUDGE_MYSQL_URL``):

1. create a temporary database and a restricted user that may touch only that database,
   both named ``kece_judge_n<node>_x<expiry>_j<job>_e<lease>_<random>`` (the expiry in
   base 36 Unix seconds: when no job of this node can still be using it) so a leftover can
   be traced and swept: at start every name with this node's prefix is dropped, and while
   the agent runs a periodic sweep drops the expired ones (`JudgeDb.sweep_expired`);
2. load the problem's schema and seed into it as admin;
3. query problems: run the reference answer as admin, then the submission as the
   restricted user, and compare the two result sets;
   DML problems (``check`` given): run the submission as the restricted user, then the
   check statement, in a fresh restricted session under the same limits; run schema, seed,
   answer and check in a second temporary database, and compare the two check results —
   after making sure every table and view the reference has is still a table or view of
   the same kind (a submission may not swap a checked table for a view of its own);
4. kill every session of the job, then drop everything, whatever happened.

Whatever a submission can change with ``SET SESSION`` is a default, not a limit: the
statement time limit (``max_statement_time`` on MariaDB, ``max_execution_time`` on MySQL)
and the in-memory table size (``max_heap_table_size``, ``tmp_table_size``) are set for
precise errors, and a watchdog on an admin connection enforces both from outside — it
kills the session at the time limit, and once the job's MEMORY tables plus its sessions'
memory pass the memory limit. Every connection refuses ``LOAD DATA LOCAL INFILE`` (the
server would otherwise read the agent's own files through it). The restricted user's
grant names its database with ``_`` escaped, so it admits no other name.

Syntax error 1064 is CE; running out of the session's memory (an in-memory table larger
than the memory limit, out of sort memory) MLE; other SQL errors RE; a timeout TLE; a
result larger than the output limit OLE; a different result WA.
"""

from __future__ import annotations

import hashlib
import re
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
# The watchdog's look at the job's memory: at most this long, and what ends it early.
FOOTPRINT_BOUND_MS = 500
FOOTPRINT_GAVE_UP = {1969, 3024, 1205}  # statement time (MariaDB, MySQL), lock wait timeout
# A killed session may hold its locks a moment longer (rollback); cleanup waits this long
# for it, then gives up to the next sweep rather than blocking a slot.
CLEANUP_WAIT_S = 10
LOCK_WAIT_S = 5
WATCHDOG_POLL_S = 0.05
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


def grant_pattern(name: str) -> str:
    """A database name as GRANT reads it: ``_`` and ``%`` are wildcards there unless escaped."""
    return name.replace("_", "\\_").replace("%", "\\%")


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


# A temporary database outlives its job by at most this much: the job's own limit, then the
# time its cleanup may take.
DEFAULT_LIFETIME_S = 900 + 2 * CLEANUP_WAIT_S


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


class JudgeDb:
    def __init__(self, target: MysqlTarget, *, lifetime_s: float = DEFAULT_LIFETIME_S):
        self.target = target
        self.lifetime_s = lifetime_s
        self.node_id: int | None = None
        self._flavor: str | None = None

    @property
    def prefix(self) -> str:
        return f"{PREFIX}n{self.node_id}_"

    def connect(self, user: str | None = None, password: str | None = None, db: str | None = None,
                multi: bool = False):
        kwargs = dict(host=self.target.host, port=self.target.port, user=user or self.target.user,
                      passwd=self.target.password if user is None else password, connect_timeout=10,
                      autocommit=True, charset="utf8mb4", local_infile=0)
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

    def table_files_may_go_anywhere(self) -> bool:
        """Whether the server honours DATA DIRECTORY and INDEX DIRECTORY (its symbolic link
        support): a restricted user's CREATE TABLE may then put files outside the data folder."""
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute("SELECT @@have_symlink")
            return _str(cur.fetchone()[0]).upper() == "YES"
        finally:
            conn.close()

    # What a session may raise its in-memory table sizes to before the agent warns: more than
    # any memory limit a SQL problem sets, and far below a judge server's memory.
    HEAP_TABLE_CAP_BYTES = 256 << 20

    def heap_tables_unbounded(self) -> int | None:
        """How far a session (a submission's, which may SET its own) can raise
        max_heap_table_size and tmp_table_size, when that is past HEAP_TABLE_CAP_BYTES: a
        temporary MEMORY table then holds that much of the server's memory, which the
        watchdog does not see. None when the server caps them (--maximum-max_heap_table_size,
        --maximum-tmp_table_size)."""
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute("SET SESSION max_heap_table_size = 4294967296, tmp_table_size = 4294967296")
            cur.execute("SELECT LEAST(@@session.max_heap_table_size, @@session.tmp_table_size)")
            reached = int(cur.fetchone()[0])
            return reached if reached > self.HEAP_TABLE_CAP_BYTES else None
        finally:
            conn.close()

    def temporary_tables_grow_the_disk(self) -> str | None:
        """MariaDB keeps a submission's temporary InnoDB tables in ibtmp1, which grows with
        them and shrinks only when the server restarts: its path setting when that file has
        no `:max:` (the disk then has no bound but its own), else None. MySQL 8 gives each
        session a temporary tablespace of its own and takes it back at disconnect."""
        if self.flavor() != "mariadb":
            return None
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute("SELECT @@innodb_temp_data_file_path")
            path = _str(cur.fetchone()[0])
            return path if "autoextend" in path and ":max:" not in path else None
        finally:
            conn.close()

    def restore_login(self, env: "TempEnv") -> None:
        """The restricted user's password as the job's environment made it."""
        conn = self.admin()
        try:
            conn.cursor().execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (env.user, env.password))
        finally:
            conn.close()

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
        # MySQL 8 allows 32 characters in a user name (MariaDB 80): keep the node prefix and
        # the expiry, which the sweeps need, and replace the rest by a digest.
        if len(name) > 32 and self.flavor() == "mysql":
            owner = self.prefix + tag.split("_", 1)[0] + "_"
            name = owner + hashlib.sha256(tag.encode()).hexdigest()[: 31 - len(owner)]
        return name

    def expiry_of(self, name: str) -> int | None:
        """The Unix time a temporary name of this node expires at, or None (not ours, or
        made before names carried their expiry: the start-up sweep takes those)."""
        match = re.match(re.escape(self.prefix) + r"x([0-9a-z]{1,12})_", name)
        return int(match.group(1), 36) if match else None

    # -- temporary resources -----------------------------------------------------------

    def create_env(self, tag: str, *, now: float | None = None) -> "TempEnv":
        expires = int((time.time() if now is None else now) + self.lifetime_s)
        tag = f"x{_base36(expires)}_{tag}"
        env = TempEnv(db=f"{self.prefix}{tag}", user=self.user_name(tag), password=secrets.token_urlsafe(18))
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE DATABASE {_quote_ident(env.db)} CHARACTER SET utf8mb4")
            env.created_db = True
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s WITH MAX_USER_CONNECTIONS 2",
                        (env.user, env.password))
            env.created_user = True
            cur.execute(f"GRANT {USER_PRIVILEGES} ON `{grant_pattern(env.db)}`.* TO %s@'%%'", (env.user,))
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
        """Drop every name it can: one that will not go (still locked) does not keep the
        others; the first failure is raised once the rest are tried, for the next sweep."""
        conn = self.admin()
        failed: list[MySQLdb.Error] = []
        try:
            cur = conn.cursor()
            # A DROP behind a lock waits lock_wait_timeout (a day by default) for a metadata
            # lock and innodb_lock_wait_timeout for a row lock: fail fast and leave it to the
            # next sweep instead.
            cur.execute(f"SET SESSION lock_wait_timeout = {LOCK_WAIT_S}, innodb_lock_wait_timeout = {LOCK_WAIT_S}")
            databases = list(dict.fromkeys(databases + self._admitted(cur, users)))
            self._kill_sessions(cur, databases, users)
            self._roll_back_abandoned_xa(cur)
            statements = [("DROP USER IF EXISTS %s@'%%'", (user,)) for user in users] + \
                [(f"DROP DATABASE IF EXISTS {_quote_ident(db)}", None) for db in databases]
            for statement, args in statements:
                try:
                    cur.execute(statement, args)
                except MySQLdb.Error as exc:
                    failed.append(exc)
        finally:
            conn.close()
        if failed:
            raise failed[0]

    @staticmethod
    def _roll_back_abandoned_xa(cur) -> None:
        """A submission's `XA PREPARE` outlives its session (MariaDB 10.5+, MySQL 8): the
        prepared transaction keeps its row locks with no one attached, and the job's
        database could never be dropped. On a server kept for judging no XA is anyone's
        but a submission's; one still attached to a live session refuses the rollback and
        is left to its own job's cleanup."""
        try:
            cur.execute("XA RECOVER")
            prepared = cur.fetchall()
        except MySQLdb.Error:
            return  # no right to see them (MySQL 8 without XA_RECOVER_ADMIN)
        for format_id, gtrid_length, _bqual_length, data in prepared:
            data = bytes(data) if not isinstance(data, bytes) else data
            gtrid, bqual = data[:int(gtrid_length)], data[int(gtrid_length):]
            try:
                cur.execute("XA ROLLBACK X%s, X%s, %s", (gtrid.hex(), bqual.hex(), int(format_id)))
            except MySQLdb.Error:
                continue
            logger.warning("abandoned XA transaction rolled back", extra={"formatId": int(format_id)})

    @staticmethod
    def _admitted(cur, users: list[str]) -> list[str]:
        """Every existing database the users' grants admit (``LIKE`` reads a grant's pattern as
        the privilege check does), so what a user could create goes with it."""
        if not users:
            return []
        cur.execute("SELECT DISTINCT s.SCHEMA_NAME FROM information_schema.SCHEMATA s JOIN mysql.db d "
                    "ON s.SCHEMA_NAME LIKE d.Db WHERE d.User IN (" + ",".join(["%s"] * len(users)) + ")", users)
        return [_str(r[0]) for r in cur.fetchall()]

    @staticmethod
    def _kill_sessions(cur, databases: list[str], users: list[str]) -> None:
        """Kill the users' sessions and any session using the databases (DROP USER leaves
        sessions running, DROP DATABASE waits for them), and wait until they are gone."""
        if not databases and not users:
            return
        query = ("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND ("
                 "USER IN (" + ",".join(["%s"] * len(users) or ["NULL"]) + ") OR "
                 "DB IN (" + ",".join(["%s"] * len(databases) or ["NULL"]) + "))")
        deadline = time.monotonic() + CLEANUP_WAIT_S
        killed: set[int] = set()
        while True:
            cur.execute(query, users + databases)
            alive = [int(pid) for (pid,) in cur.fetchall()]
            if not alive or time.monotonic() >= deadline:
                return
            for pid in alive:
                if pid not in killed:
                    try:
                        cur.execute(f"KILL {pid}")
                    except MySQLdb.Error:
                        pass
                    killed.add(pid)
            time.sleep(WATCHDOG_POLL_S)

    def leftovers(self) -> tuple[list[str], list[str]]:
        like = self.prefix.replace("_", "\\_") + "%"
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE %s", (like,))
            dbs = [r[0] for r in cur.fetchall()]
            cur.execute("SELECT DISTINCT User FROM mysql.user WHERE User LIKE %s", (like,))
            users = [_str(r[0]) for r in cur.fetchall()]
            return dbs, users
        finally:
            conn.close()

    def sweep(self) -> tuple[list[str], list[str]]:
        """Everything of this node's (at start, when none of its jobs can be running)."""
        dbs, users = self.leftovers()
        if dbs or users:
            self.drop(dbs, users)
        return dbs, users

    def sweep_expired(self, now: float | None = None) -> tuple[list[str], list[str]]:
        """What a job of this node left past its expiry (a cleanup that failed or was cut
        short): safe while jobs run, since a running job's names have not expired."""
        now = time.time() if now is None else now
        dbs, users = self.leftovers()
        expired = [[name for name in names if (self.expiry_of(name) or now) < now] for names in (dbs, users)]
        if expired[0] or expired[1]:
            self.drop(*expired)
        return expired[0], expired[1]

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
        heap = max(16 * 1024, int(memory_limit_mb) * 1024 * 1024)
        dog = Watchdog(self, env, conn.thread_id(), time_limit_ms=time_limit_ms, memory_bytes=heap, cancel=cancel)
        start = time.monotonic()
        rows, error = None, None
        try:
            cur = conn.cursor(MySQLdb.cursors.SSCursor)
            seconds = max(0.001, time_limit_ms / 1000)
            if self.flavor() == "mariadb":
                cur.execute(f"SET SESSION max_statement_time = {seconds:.3f}")
            else:
                cur.execute(f"SET SESSION max_execution_time = {int(time_limit_ms)}")
            cur.execute(f"SET SESSION max_heap_table_size = {heap}, tmp_table_size = {heap}")
            dog.start()
            start = time.monotonic()
            rows = _last_result(cur, script, output_limit_bytes)
        except MySQLdb.Error as exc:
            error = exc
        finally:
            elapsed = _ms(start)
            dog.stop()
            _close(conn)
        if dog.fired == "cancel" or (error is not None and cancel.is_set()):
            raise JobCancelled()
        if dog.fired == "memory":
            return Outcome("MLE", message="in-memory tables over the memory limit", time_ms=elapsed)
        if error is None:
            if rows is _OVER_LIMIT:
                return Outcome("OLE", time_ms=elapsed)
            if dog.fired or elapsed > time_limit_ms:
                return Outcome("TLE", time_ms=elapsed)
            return Outcome(None, rows=rows, time_ms=elapsed)
        code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
        message = str(error.args[1]) if len(error.args) > 1 else str(error)
        if dog.fired or code in TIMEOUT_CODES:
            return Outcome("TLE", message=message, time_ms=max(elapsed, time_limit_ms))
        if code == SYNTAX_ERROR:
            return Outcome("CE", message=f"ERROR {code}: {message}", time_ms=elapsed)
        if code in MEMORY_CODES:
            return Outcome("MLE", message=f"ERROR {code}: {message}", time_ms=elapsed)
        return Outcome("RE", message=f"ERROR {code}: {message}", time_ms=elapsed)

    def object_types(self, db: str) -> dict[str, str]:
        """``{name: TABLE_TYPE}`` of a database's tables and views."""
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute("SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
            return {_str(name): _str(kind) for name, kind in cur.fetchall()}
        finally:
            conn.close()


class Watchdog(threading.Thread):
    """Enforces a restricted session's limits from an admin connection, where the submission
    cannot lift them: kills it at the time limit (plus a margin for the server's own, more
    precise limit), on cancel, and once the job's MEMORY tables and its sessions' memory
    pass the memory limit. ``fired`` says why ("time", "cancel", "memory") or is None.

    Temporary MEMORY tables are private to their session and invisible here (MariaDB 10.11,
    MySQL 8): they are bounded by the time limit and by what the session may raise
    ``max_heap_table_size`` to, which only the server's ``--maximum-max_heap_table_size``
    caps (the agent warns at start without one: `JudgeDb.heap_tables_unbounded`)."""

    def __init__(self, judge_db: JudgeDb, env: "TempEnv", thread_id: int, *, time_limit_ms: int,
                 memory_bytes: int, cancel: threading.Event):
        super().__init__(name=f"sql-watchdog-{thread_id}", daemon=True)
        self.judge_db, self.env, self.thread_id = judge_db, env, int(thread_id)
        self.time_limit_ms, self.memory_bytes, self.cancel = time_limit_ms, memory_bytes, cancel
        self.fired: str | None = None
        self._done = threading.Event()

    def stop(self) -> None:
        self._done.set()
        if self.ident is not None:
            self.join()

    def run(self) -> None:
        deadline = time.monotonic() + self.time_limit_ms / 1000 + 0.5
        admin = None
        try:
            while not self._done.wait(WATCHDOG_POLL_S):
                try:
                    admin = admin or self._connect()
                    reason = self._reason(admin.cursor(), deadline)
                    if reason:
                        self.fired = reason
                        admin.cursor().execute(f"KILL {self.thread_id}")
                        return
                except (MySQLdb.Error, InfraError):
                    # The judge server is away: the statement fails on its own; try again.
                    admin = _close(admin)
            # MEMORY tables outlive their statement: a last look finds one that was filled
            # between two polls.
            admin = admin or self._connect()
            if self._footprint(admin.cursor()) > self.memory_bytes:
                self.fired = "memory"
        except (MySQLdb.Error, InfraError):
            pass
        finally:
            _close(admin)

    def _connect(self):
        admin = self.judge_db.admin()
        # A look at the tables waits for the metadata lock of one being created (CREATE TABLE …
        # AS SELECT SLEEP(…)): bounded, so that the deadline and a cancel are always checked.
        if self.judge_db.flavor() == "mysql":
            # MySQL 8 caches table sizes for a day by default.
            admin.cursor().execute("SET SESSION information_schema_stats_expiry = 0, lock_wait_timeout = 1, "
                                   f"max_execution_time = {FOOTPRINT_BOUND_MS}")
        else:
            admin.cursor().execute(f"SET SESSION lock_wait_timeout = 1, "
                                   f"max_statement_time = {FOOTPRINT_BOUND_MS / 1000:.3f}")
        return admin

    def _reason(self, cur, deadline: float) -> str | None:
        if self.cancel.is_set():
            return "cancel"
        if time.monotonic() >= deadline:
            return "time"
        if self._footprint(cur) > self.memory_bytes:
            return "memory"
        return None

    def _footprint(self, cur) -> int:
        """The job's MEMORY tables and its sessions' memory; 0 (unknown: looked at again at
        the next poll) when the look outlived its bound, waiting on a table's lock."""
        try:
            return self._measure_footprint(cur)
        except MySQLdb.OperationalError as exc:
            if exc.args and exc.args[0] in FOOTPRINT_GAVE_UP:
                return 0
            raise

    def _measure_footprint(self, cur) -> int:
        tables = ("SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) FROM information_schema.TABLES "
                  "WHERE TABLE_SCHEMA = %s AND ENGINE = 'MEMORY'")
        if self.judge_db.flavor() == "mariadb":
            cur.execute(f"SELECT ({tables}) + (SELECT COALESCE(SUM(MEMORY_USED), 0) "
                        "FROM information_schema.PROCESSLIST WHERE USER = %s)", (self.env.db, self.env.user))
        else:
            cur.execute(tables, (self.env.db,))
        return int(cur.fetchone()[0] or 0)


_OVER_LIMIT = object()


def _last_result(cur, script: str, output_limit_bytes: int):
    """The script's last result set (None if it had none), or _OVER_LIMIT once a result set
    passes the output limit: rows are counted one by one as they stream in, never held
    first (a batch of rows of 16 MB each held a gigabyte before its size was known)."""
    cur.execute(script)
    last = None
    while True:
        if cur.description is not None:
            rows, size = [], 0
            while (row := cur.fetchone()) is not None:
                size += sum(len(str(v)) + 1 for v in row)
                if size > output_limit_bytes:
                    return _OVER_LIMIT
                rows.append(row)
            last = rows
        if cur.nextset() is None:
            return last


def _close(conn) -> None:
    if conn is not None:
        try:
            conn.close()
        except MySQLdb.Error:
            pass
    return None


def _str(value) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


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


def _run_check(judge_db: JudgeDb, env: TempEnv, check: str, expected_types: dict[str, str], run_limits: dict,
               time_ms: int) -> Outcome:
    """The check statement over what the submission left: as the restricted user in a fresh
    session under the submission's own limits, so a view, a huge table or a dropped table the
    submission put under a checked name ends as its own verdict (WA, TLE, OLE, RE)."""
    actual_types = judge_db.object_types(env.db)
    changed = sorted(name for name, kind in expected_types.items() if actual_types.get(name) != kind)
    if changed:
        return Outcome("WA", message=f"not a {expected_types[changed[0]].lower()} any more: {changed[0]}",
                       time_ms=time_ms)
    # A submission may change its own password (SET PASSWORD needs no privilege): the check's
    # login would fail, and the job end as an infrastructure error, every attempt.
    judge_db.restore_login(env)
    outcome = judge_db.run_as_user(env, check, **run_limits)
    outcome.time_ms = time_ms
    return outcome


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
    run_limits = dict(time_limit_ms=int(limits["timeLimitMs"]), cancel=ctx.cancel,
                      output_limit_bytes=int(limits["outputLimitKb"]) * 1024,
                      memory_limit_mb=int(limits.get("memoryLimitMb") or 256))
    try:
        with ctx.timed("sql"):
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
                expected_types = judge_db.object_types(ref_db)
            ctx.check()
            ctx.progress("JUDGING", 1)
            outcome = judge_db.run_as_user(env, submission, **run_limits)
            if outcome.verdict is None and check is not None:
                outcome = _run_check(judge_db, env, check, expected_types, run_limits, outcome.time_ms)
            if outcome.verdict is None:
                if outcome.rows is None:
                    outcome.verdict = "WA"  # a query problem answered without a result set
                else:
                    outcome.verdict = "AC" if results_equal(outcome.rows, expected, ordered) else "WA"
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
