"""Reads several callers share: user-facing status, pool readiness."""

from django.db.models import Q

from judging.models import JobState
from judging.timing import offline_after
from nodes.models import DesiredState, HostGroupStatus, JudgeNode


def ready_nodes(*, now):
    """Enabled nodes with a fresh heartbeat, an open session and good health."""
    return JudgeNode.objects.filter(
        desired_state=DesiredState.ENABLED, session_open=True, health_ok=True,
        last_heartbeat_at__gte=now - offline_after(), revoked_at__isnull=True,
        host_group__status=HostGroupStatus.ACTIVE,
    ).filter(~Q(runtime_spec=""))


def ready_pools(*, now) -> set[str]:
    return set(ready_nodes(now=now).values_list("pool", flat=True).distinct())


def submission_status(submission, job, *, now, pool_has_ready_node) -> tuple[str, str | None]:
    """(status, waitReason) as the user sees them (ARCHITECTURE §4, API.md)."""
    if submission.deleted_at is not None or (job is not None and job.state == JobState.CANCELLED):
        return "CANCELLED", None
    if job is None:
        return (submission.verdict or "SYSTEM_ERROR"), None
    if job.state == JobState.COMPLETED:
        return submission.verdict or job.result.get("verdict"), None
    if job.state == JobState.FAILED:
        return "SYSTEM_ERROR", None
    if job.state == JobState.RUNNING:
        return (job.progress_phase or "COMPILING"), None
    if job.available_at > now:
        return "PENDING", "backoff"
    if not pool_has_ready_node:
        return "PENDING", "no_node"
    return "PENDING", "queued"
