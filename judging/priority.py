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

Inside the exam class, participants take turns: an exam job queued while its participant
already has r active exam jobs in the pool (its rank, `judging.pressure.exam_rank`, at most
M = KECE_EXAM_ACTIVE_MAX) is keyed r × W / (2 (M + 1)) later, so a participant's second job
goes behind the other participants' first jobs of that span, their third behind the
others' second, and so on: 60 answers of one participant do not make another's one wait.
The shift stays under W / 2, so exam work still sorts ahead of practice due at the same
time, and the key stays before available_at (the claim's range).
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


def exam_turn(rank: int) -> timedelta:
    """How much later an exam job of this rank among its participant's active ones sorts."""
    turns = settings.KECE_EXAM_ACTIVE_MAX
    return timedelta(seconds=settings.KECE_MAX_CLASS_WAIT_S) * min(rank, turns) / (2 * (turns + 1))


def claim_key(priority_class: str, available_at, *, beyond_share: bool = False, exam_rank: int = 0):
    key = available_at - class_lead(priority_class, beyond_share=beyond_share)
    if priority_class == PriorityClass.EXAM and exam_rank:
        key += exam_turn(exam_rank)
    return key

