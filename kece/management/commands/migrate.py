"""Django's `migrate`, on a connection without the read and write timeouts: altering a
large table takes longer than any request's statement may (`kece.mysql.unbounded`)."""

from django.core.management.commands import migrate

from kece.mysql import unbounded


class Command(migrate.Command):
    def handle(self, *args, **options):
        with unbounded(options["database"]):
            return super().handle(*args, **options)
