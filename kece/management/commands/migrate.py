"""Django's `migrate`, on a connection without the read and write timeouts: altering a
large table takes longer than any request's statement may (`kece.mysql.unbounded`).

Each change of a table waits at most `--lock-wait` seconds for the table's metadata lock:
while an ALTER waits for a long statement or transaction on its table, every later
statement on that table (submissions, claims, renewals) queues behind it. Past the bound
that step fails, changing nothing, and `migrate` can be run again."""

from django.core.management.commands import migrate
from django.db import connections

from kece.mysql import unbounded

LOCK_WAIT_S = 10


class Command(migrate.Command):
    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--lock-wait", type=int, default=LOCK_WAIT_S, metavar="SECONDS",
                            help=f"how long a table change waits for the table's lock (default {LOCK_WAIT_S})")

    def handle(self, *args, **options):
        with unbounded(options["database"]):
            connection = connections[options["database"]]
            if connection.vendor == "mysql":
                with connection.cursor() as cursor:
                    cursor.execute("SET SESSION lock_wait_timeout = %s", [max(1, options["lock_wait"])])
            return super().handle(*args, **options)
