"""Django's MySQL/MariaDB backend, opening a transaction with one statement, and with the
read and write timeouts lifted for the work that scans whole tables.

Django opens an `atomic` block by turning autocommit off and, after the COMMIT, on again:
three round trips to the server besides the transaction's own statements, on every
submission and every result post. START TRANSACTION under autocommit opens the same
transaction (the session's isolation level, the same locks), and its COMMIT or ROLLBACK
leaves the session in autocommit again, so the client sees from the server's reply that
nothing is left to switch back: two round trips instead of three. It is the hook Django
gives backends for that (`_start_transaction_under_autocommit`, used for an outermost
`atomic` only); turning autocommit off by hand still does what it did.

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

STATEMENT_TIMEOUTS = ("read_timeout", "write_timeout")


class DatabaseWrapper(base.DatabaseWrapper):
    # Per connection, so per thread: lifting them for one task leaves the others' alone.
    statement_timeouts = True

    def get_connection_params(self):
        params = super().get_connection_params()
        if not self.statement_timeouts:
            for option in STATEMENT_TIMEOUTS:
                params.pop(option, None)
        return params

    def init_connection_state(self):
        super().init_connection_state()
        bound = self.settings_dict["OPTIONS"].get("read_timeout") if self.statement_timeouts else None
        if bound and self.mysql_is_mariadb:
            with self.wrap_database_errors:
                self.connection.query(f"SET SESSION idle_transaction_timeout = {int(bound)}")

    def _start_transaction_under_autocommit(self):
        with self.wrap_database_errors:
            self.connection.query("START TRANSACTION")
