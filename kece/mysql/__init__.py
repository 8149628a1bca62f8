"""Django's MySQL/MariaDB backend, with a transaction's statements sent together where no
answer is awaited (`base`, `pipeline`), and `unbounded` for the work whose statements may
outlast the read and write timeouts."""

import contextlib

from django.db import connections


@contextlib.contextmanager
def unbounded(alias: str = "default"):
    """Run the block on a connection of this thread without the read and write timeouts
    (opened anew, and closed after, so that the next task connects with them again)."""
    connection = connections[alias]
    if not hasattr(connection, "statement_timeouts") or connection.in_atomic_block:
        yield  # another backend, or inside a transaction that cannot change connection
        return
    connection.close()
    connection.statement_timeouts = False
    try:
        yield
    finally:
        connection.close()
        connection.statement_timeouts = True
