"""The periodic work of the control plane, each a small `step()` that can be tested alone."""

import logging

from django.db import close_old_connections
from django.utils import timezone

logger = logging.getLogger("kece.periodic")


def reap_step(now=None):
    from judging.services.leases import jobs_reap_expired

    report = jobs_reap_expired(now=now or timezone.now())
    if report.requeued or report.failed:
        logger.info("reaper pass", extra={"requeued": len(report.requeued), "failed": len(report.failed)})
    return report


def events_step(now=None):
    from judging.services.events import events_dispatch

    report = events_dispatch(now=now or timezone.now())
    if report.applied or report.retried or report.dead:
        logger.info("event dispatch pass", extra={"applied": len(report.applied), "retried": len(report.retried),
                                                  "dead": len(report.dead)})
    return report


def checks_step(now=None):
    from nodes.checks import checks_expire

    expired = checks_expire(now=now or timezone.now())
    if expired:
        logger.warning("node checks expired", extra={"expired": expired})
    return expired


def run_guarded(step):
    """Run one step the way a scheduler must: fresh connections, errors logged not raised."""
    close_old_connections()
    try:
        return step()
    except Exception:
        logger.exception("periodic step failed", extra={"step": step.__name__})
        return None
    finally:
        close_old_connections()
