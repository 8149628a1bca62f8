"""System checks that catch bad production configuration at start-up."""

from django.conf import settings
from django.core.checks import Error, Warning, register


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
    if settings.KECE_LEASE_TTL_MS < 2 * settings.KECE_RENEW_INTERVAL_MS:
        problems.append(Error("KECE_LEASE_TTL_MS must be at least twice KECE_RENEW_INTERVAL_MS.",
                              hint="A node must get two renewals in per lease.", id="kece.E001"))
    return problems
