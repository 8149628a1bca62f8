"""Django's MySQL/MariaDB backend, opening a transaction with one statement, sending the
statements of a transaction that await no answer with the next one that does
(`kece.mysql.pipeline`), and with the read and write timeouts lifted for the work that
scans whole tables.

Django opens an `atomic` block by turning autocommit off and, after the COMMIT, on again:
three round trips to the server besides the transaction's own statements, on every
submission and every result post. START TRANSACTION under autocommit opens the same
transaction (the session's isolation level, the same locks), and its COMMIT or ROLLBACK
leaves the session in autocommit again, so the client sees from the server's reply that
nothing is left to switch back. It is the hook Django gives backends for that
(`_start_transaction_under_autocommit`, used for an outermost `atomic` only); the START
TRANSACTION then goes with the transaction's first statement. Turning autocommit off by
hand still does what it did.

The read and write timeouts (`KECE_DB_READ_TIMEOUT_S`, `KECE_DB_WRITE_TIMEOUT_S`) are given
to the client library when it connects, so they cannot change for one statement: a
connection that must run statements longer than they allow (a migration rebuilding a large
table, the reconciliation's scans) is opened without them (`kece.mysql.unbounded`).

The server waits on its client no longer than the client waits on the server: on MariaDB a
session left idle inside a transaction for longer than the read timeout is ended by the
server (`idle_transaction_timeout`), its transaction rolled back and its row locks
released. A client that gives up on a cut link closes its socket, but the server may never
hear of it (the FIN or RST is lost with the link, and a server waiting for the next command
sends nothing that could fail); without this bound such a session would hold the rows it
locked (a node, its jobs) until `wait_timeout`, hours later, and `SKIP LOCKED` claims and
the reaper would pass those jobs by all that time.
"""

from django.db.backends.mysql import base

from kece.mysql.pipeline import Pending, PipelinedCursor, send

STATEMENT_TIMEOUTS = ("read_timeout", "write_timeout")


class DatabaseWrapper(base.DatabaseWrapper):
    # Per connection, so per thread: lifting them for one task leaves the others' alone.
    statement_timeouts = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = Pending()
        self.deferring = False
        self.deferred_rows = None

    def get_connection_params(self):
        params = super().get_connection_params()
        # Several statements in one packet (`kece.mysql.pipeline`): mysqlclient's default,
        # kept whatever it becomes. Every statement is bound by the client library as
        # before; none is built from text a user gave.
        params["multi_statements"] = True
        if not self.statement_timeouts:
            for option in STATEMENT_TIMEOUTS:
                params.pop(option, None)
        return params

    def init_connection_state(self):
        self.pending.clear()
        super().init_connection_state()
        bound = self.settings_dict["OPTIONS"].get("read_timeout") if self.statement_timeouts else None
        if bound and self.mysql_is_mariadb:
            with self.wrap_database_errors:
                self.connection.query(f"SET SESSION idle_transaction_timeout = {int(bound)}")

    def create_cursor(self, name=None):
        return PipelinedCursor(self.connection.cursor(), self)

    def defer(self, sql: str, params=None, *, rows: bool = False) -> list | None:
        """Give a statement whose answer is not needed before the transaction's next one
        that is (`kece.mysql.pipeline`): it is counted and logged now and sent with that one.
        With `rows`, the list its rows will be in once it has been sent. Outside a
        transaction it is sent at once."""
        if not self.in_atomic_block:
            with self.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall()) if rows else None
        sink = [] if rows else None
        self.deferring, self.deferred_rows = True, sink
        try:
            with self.cursor() as cursor:
                cursor.execute(sql, params)
        finally:
            self.deferring, self.deferred_rows = False, None
        return sink

    def flush(self) -> None:
        """Send what is deferred, now."""
        if self.pending.statements:
            with self.wrap_database_errors, self.connection.cursor() as cursor:
                send(cursor, self.pending.take())

    def _start_transaction_under_autocommit(self):
        self.pending.begin()  # sent with the transaction's first statement

    def _set_autocommit(self, autocommit):
        self.flush()  # nothing deferred outlives the transaction it was given in
        super()._set_autocommit(autocommit)

    def _savepoint_rollback(self, sid):
        self.pending.discard()  # given after the savepoint: undone, so never sent
        super()._savepoint_rollback(sid)

    def _commit(self):
        pending = self.pending
        if pending.nothing_sent() and len(pending.statements) == 1:
            pending.clear()  # a transaction that ran nothing
            return
        if pending.statements:
            with self.wrap_database_errors, self.connection.cursor() as cursor:
                send(cursor, pending.take(), b"COMMIT")
            return
        super()._commit()

    def _rollback(self):
        pending = self.pending
        never_begun = pending.nothing_sent()
        pending.clear()  # rolled back with the rest, or never begun
        if not never_begun:
            super()._rollback()

    def _close(self):
        self.pending.clear()
        return super()._close()
