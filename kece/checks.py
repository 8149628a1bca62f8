"""System checks that warn of a configuration fit for trying KECE, not for production
(`manage.py check --deploy`). Settings that cannot work stop the start (`kece.settings`)."""

from django.conf import settings
from django.core.checks import Warning, register


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
