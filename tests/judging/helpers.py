"""Short ways to drive the services in tests."""

from django.utils import timezone

from judging.services.claim import job_claim
from judging.services.settle import CaseResult, SettleRequest, job_settle
from judging.services.submit import submission_submit
from nodes.models import JudgeNode


def submit(user, problem, *, language="python", code="print(1)", now=None, **kwargs):
    return submission_submit(user=user, problem_id=problem.pk, language=language, code=code, now=now, **kwargs)


def claim(identity, *, free_slots=1, now=None, heartbeat=True):
    """Claim as the node would; by default the node heartbeats just before (tests move
    `now` forward further than a heartbeat interval)."""
    now = now or timezone.now()
    if heartbeat:
        JudgeNode.objects.filter(pk=identity.node_id).update(last_heartbeat_at=now)
    return job_claim(identity=identity, free_slots=free_slots, now=now).jobs


def judged(job, *, verdict="AC", score=None, lease_epoch=None, passing=None) -> SettleRequest:
    """A JUDGED result for `job`: cases in `passing` (all, for AC) are AC with full marks,
    the others get `verdict` and nothing."""
    cases = job.snapshot.get("cases") or [{"ordinal": 1, "weight": 100}]
    if passing is None:
        passing = [c["ordinal"] for c in cases] if verdict == "AC" else []
    results = tuple(
        CaseResult(ordinal=c["ordinal"], verdict="AC" if c["ordinal"] in passing else verdict, time_ms=10,
                   memory_kb=1024, score=c["weight"] if c["ordinal"] in passing else 0)
        for c in cases
    )
    total = sum(c.score for c in results) if score is None else score
    return SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch if lease_epoch is None else lease_epoch,
                         outcome="JUDGED", verdict=verdict, score=total, time_ms=10, memory_kb=1024,
                         cases=results)


def infra_error(job, *, error="sandbox_crashed") -> SettleRequest:
    return SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="INFRA_ERROR", error=error,
                         message="the sandbox died")


def released(job) -> SettleRequest:
    return SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="RELEASED")


def settle(identity, request, *, now=None):
    return job_settle(identity=identity, request=request, now=now or timezone.now())


def stale_identities():
    """What a revoke, a rotation or a new session leaves on the node row, and the error a
    call still made with the node's old identity gets: parameters `change, error`."""
    import pytest

    from kece.errors import SessionSuperseded, Unauthenticated

    return pytest.mark.parametrize("change, error", [
        ({"revoked_at": timezone.now()}, Unauthenticated),
        ({"credential_digest": "0" * 64}, Unauthenticated),
        ({"credential_digest": None}, Unauthenticated),
        ({"session_epoch": 2}, SessionSuperseded),
        ({"session_open": False}, SessionSuperseded),
    ], ids=["revoked", "rotated", "no-credential", "new-session", "closed-session"])
