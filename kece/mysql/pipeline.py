"""Statements of one transaction sent to the server together, in order, in one round trip.

Inside a transaction most of a hot path's statements do not need their answer before the
next one is sent: a write to rows the transaction has locked, the events it inserts, the
row locks it takes in the global order once it knows their keys. Sent one at a time, each
costs a round trip (under load, most of a result post's time on the server and a context
switch or two each way). Here such a statement is *deferred*: it is checked, counted and
logged as it is given, bound to its parameters, and kept until the next statement whose
answer is needed, or the COMMIT, which carries it to the server in the same packet (MariaDB's
multi-statement protocol). The server runs them in the order given, as if they had been
sent one by one, and stops at the first that fails; that failure is raised from the
statement that carried it, inside the same transaction, which then rolls back as it would
have. So the transaction's effects, its locks and their order, and what is durable at
COMMIT are those of the same statements sent one by one.

A transaction's START TRANSACTION is deferred the same way: it goes with the first
statement, and a transaction that sent nothing sends nothing at its end.

Outside a transaction nothing is deferred: every statement is sent when given.
"""

from django.db import IntegrityError
from django.db.backends.mysql import base

BEGIN = b"START TRANSACTION"


class Pending:
    """The statements given but not yet sent, each bound to its parameters, with the list
    each one's rows go to when they come back (None: not wanted)."""

    __slots__ = ("statements", "begun")

    def __init__(self):
        self.statements: list[tuple[bytes, list | None]] = []
        self.begun = False  # whether the server has been told START TRANSACTION

    def begin(self) -> None:
        self.statements = [(BEGIN, None)]
        self.begun = False

    def take(self) -> list[tuple[bytes, list | None]]:
        statements, self.statements = self.statements, []
        if statements and statements[0][0] == BEGIN:
            self.begun = True
        return statements

    def nothing_sent(self) -> bool:
        """A transaction whose START TRANSACTION never reached the server."""
        return bool(self.statements) and self.statements[0][0] == BEGIN and not self.begun

    def clear(self) -> None:
        self.statements = []
        self.begun = False

    def discard(self) -> None:
        """Drop what is not sent yet, in a transaction that goes on (a rollback to a
        savepoint: everything not sent was given after it, since a SAVEPOINT is sent with
        what came before it)."""
        self.statements = [] if self.begun else self.statements[:1]


def _translated(error):
    # As Django's CursorWrapper does: some constraint failures come as OperationalError.
    if error.args and error.args[0] in base.CursorWrapper.codes_for_integrityerror:
        return IntegrityError(*tuple(error.args))
    return error


def bind(cursor, query, args) -> bytes:
    """`query` with `args` bound, as the MySQLdb cursor would send it (bytes: a value may be
    binary). Its one private call: the public `mogrify` decodes the text, which binary
    values do not survive."""
    return cursor._mogrify(query, args)


def send(cursor, statements: list[tuple[bytes, list | None]], last: bytes | None = None) -> None:
    """Run `statements` and then `last` (already bound) in one round trip on the MySQLdb
    cursor, collecting the rows of those that want them; the cursor is left on `last`'s
    result (its rows, row count and insert id). A failing statement's error is raised once
    every answer before it has been read; the server ran nothing after it."""
    texts = [sql for sql, _ in statements]
    if last is not None:
        texts.append(last)
    try:
        # A line each: a statement that ended in a comment would otherwise swallow the rest.
        cursor.execute(b";\n".join(texts))  # no parameters: bound already, nothing is interpolated
        for index, (_, rows) in enumerate(statements):
            if rows is not None:
                rows.extend(cursor.fetchall())
            if index < len(texts) - 1 and cursor.nextset() is None:
                raise base.Database.InterfaceError(f"the server answered {index + 1} of {len(texts)} statements")
    except base.Database.OperationalError as error:
        raise _translated(error) from None


class PipelinedCursor(base.CursorWrapper):
    """Django's MySQL cursor, which defers what it is told to (`DatabaseWrapper.defer`) and
    sends what is pending ahead of anything it executes."""

    def __init__(self, cursor, database):
        super().__init__(cursor)
        self.database = database

    def execute(self, query, args=None):
        database = self.database
        pending = database.pending
        if database.deferring:
            bound = bind(self.cursor, query, args)
            pending.statements.append((bound, database.deferred_rows))
            # What Django logs as the statement run (`last_executed_query`): this one.
            self.cursor._executed = bound
            return None
        if not pending.statements:
            return super().execute(query, args)
        bound = bind(self.cursor, query, args)
        send(self.cursor, pending.take(), bound)
        self.cursor._executed = bound  # logged as itself, not with what it carried
        return self.cursor.rowcount

    def executemany(self, query, args):
        self.database.flush()
        return super().executemany(query, args)

    def callproc(self, procname, args=()):
        self.database.flush()
        return self.cursor.callproc(procname, args)
