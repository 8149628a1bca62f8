"""System checks that warn of a configuration fit for trying KECE, not for production
(`manage.py check --deploy`), and refuse a database whose tables could not hold the site's
text (`migrate`, `manage.py check --database default`). Settings that cannot work stop the
start (`kece.settings`)."""

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import connections


@register(deploy=True)
def production_configuration(app_configs, **kwargs):
    problems = []
    if settings.DATABASE_VENDOR == "sqlite":
        problems.append(Warning("SQLite is the embedded default: one server process, serial claims.",
                                hint="Set DATABASE_URL to MySQL 8 / MariaDB ≥ 10.6 for production.",
                                id="kece.W001"))
    if not settings.REDIS_URL:
        problems.append(Warning("REDIS_URL is unset: wake-ups and the scheduler run in-process.",
                                id="kece.W002"))
    return problems


@register(Tags.database)
def database_character_set(app_configs, databases=None, **kwargs):
    """The tables `migrate` makes take the database's character set: on a server left at
    latin1, every Chinese name, title or line of code would fail to save (1366)."""
    problems = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "mysql":
            continue
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@character_set_database, DATABASE()")
            charset, name = cursor.fetchone()
        if charset != "utf8mb4":
            problems.append(Error(
                f"The database {name} stores text as {charset}: names, titles and code in Chinese could not be saved.",
                hint=f"ALTER DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci (before migrating; "
                     "tables made before keep theirs), or create it so.", id="kece.E001"))
    return problems
