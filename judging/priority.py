"""Which queued job a claim takes first.

Every job carries a priority class (`PriorityClass`) and a `claim_key`: its available_at
moved earlier by the class's lead. Claims take the smallest key first, so inside a class
the order is FIFO, and across classes a job of a higher class goes ahead of lower-class
work that became due less than the difference of their leads before it:

    EXAM      lead = W        (W = KECE_MAX_CLASS_WAIT_S)
    PRACTICE  lead = W / 2
    REJUDGE   lead = 0        (and practice beyond the user's share, see below)

That is aging without a periodic pass: a job due at t sorts before everything that becomes
due after t + W, whatever its class, so no job waits longer than W behind newer work of a
higher class. The key is a plain indexed column, so the claim stays one index range scan in
key order (no filesort, no expression in ORDER BY).

Fair share: a practice job submitted while its user already has KECE_USER_INFLIGHT active
practice jobs in the pool (`judging.pressure.admission` counts them) gets the REJUDGE lead,
behind every other user's practice work of the next W / 2, and its wait reason says so. The pool stays work-conserving: with nothing
else queued, the burst still runs on every free slot.
"""

from datetime import timedelta

from django.conf import settings

from judging.models import PriorityClass

FAIR_SHARE = "fair_share"  # JudgeJob.wait_reason of a practice job beyond its user's share


def class_lead(priority_class: str, *, beyond_share: bool = False) -> timedelta:
    wait = timedelta(seconds=settings.KECE_MAX_CLASS_WAIT_S)
    if priority_class == PriorityClass.EXAM:
        return wait
    if priority_class == PriorityClass.PRACTICE and not beyond_share:
        return wait / 2
    return timedelta(0)


def claim_key(priority_class: str, available_at, *, beyond_share: bool = False):
    return available_at - class_lead(priority_class, beyond_share=beyond_share)

