"""Django's MySQL/MariaDB backend, opening a transaction with one statement.

Django opens an `atomic` block by turning autocommit off and, after the COMMIT, on again:
three round trips to the server besides the transaction's own statements, on every
submission and every result post. START TRANSACTION under autocommit opens the same
transaction (the session's isolation level, the same locks), and its COMMIT or ROLLBACK
leaves the session in autocommit again, so the client sees from the server's reply that
nothing is left to switch back: two round trips instead of three. It is the hook Django
gives backends for that (`_start_transaction_under_autocommit`, used for an outermost
`atomic` only); turning autocommit off by hand still does what it did.
"""

from django.db.backends.mysql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def _start_transaction_under_autocommit(self):
        with self.wrap_database_errors:
            self.connection.query("START TRANSACTION")
