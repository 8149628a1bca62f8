"""Bulk rejudge as an operation: chosen at once, enqueued a batch at a time, tracked.

`rejudge_request` fixes the list of submissions when it is asked for (a problem's, those a
node judged in a time range, or a given list). `rejudges_advance` — a periodic step — queues
them at REJUDGE class (a submission whose job still waits or runs, in that job's class:
`rejudge_locked`), each in a transaction of its own, keeping at most
`KECE_REJUDGE_BATCH` of an operation's jobs queued at a time and none into a pool that is
throttling (`judging.pressure`): a bulk rejudge never stands between a pool and its
recovery. Each job settles like any other, so best results, first-accepted records and
practice scores follow through the outbox. Progress is read from the jobs themselves.
Cancelling stops the enqueuing; what was queued or ran stays.
"""

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, OuterRef, Q, Subquery
from django.db.models.fields.json import KT

from judging import pressure
from judging.models import (
    SUBMISSION_MODELS, JobKind, JobState, JudgeJob, PriorityClass, Problem, RejudgeItem, RejudgeOperation, RejudgeState,
)
from judging.services.rejudge import awaiting_hand_in, locked_live_submission, rejudge_locked, rejudge_refusal
from judging.system import system_user_id
from kece.api import iso
from kece.errors import Invalid, NotFound

logger = logging.getLogger("kece.rejudge")


def _problem_submissions(problem_id: int) -> list[tuple[str, int, str]]:
    problem = Problem.objects.filter(pk=problem_id, is_canary=False).first()
    if problem is None:
        raise Invalid("Unknown problem.", fields={"problemId": ["unknown problem"]})
    model = SUBMISSION_MODELS[problem.kind]
    return [(model.TYPE, pk, language) for pk, language in
            model.objects.filter(problem=problem, deleted_at__isnull=True).exclude(user_id=system_user_id())
            .exclude(awaiting_hand_in()).order_by("id").values_list("id", "language")]


def _node_submissions(node_id: int, since, until) -> list[tuple[str, int, str]]:
    """The submissions whose current result this node judged, or failed on, in [since, until)."""
    from nodes.models import JudgeNode

    if not JudgeNode.objects.filter(pk=node_id).exists():
        raise Invalid("Unknown node.", fields={"nodeId": ["unknown node"]})
    jobs = JudgeJob.objects.filter(kind=JobKind.JUDGE, last_node_id=node_id,
                                   state__in=(JobState.COMPLETED, JobState.FAILED), finished_at__gte=since)
    if until is not None:
        jobs = jobs.filter(finished_at__lt=until)
    found = []
    for submission_type, model in SUBMISSION_MODELS.items():
        current = model.objects.filter(deleted_at__isnull=True, current_judge_job_id__in=Subquery(
            jobs.filter(submission_type=submission_type).values("id"))).exclude(user_id=system_user_id())
        found += [(submission_type, pk, language) for pk, language in current.values_list("id", "language")]
    return sorted(found, key=lambda row: (row[0], row[1]))


def _listed_submissions(refs: list[dict]) -> list[tuple[str, int, str]]:
    found, missing = [], []
    for submission_type, model in SUBMISSION_MODELS.items():
        ids = {ref["id"] for ref in refs if ref["type"] == submission_type}
        languages = dict(model.objects.filter(pk__in=ids, deleted_at__isnull=True).values_list("id", "language"))
        found += [(submission_type, pk, languages[pk]) for pk in sorted(languages)]
        missing += [f"{submission_type}:{pk}" for pk in sorted(ids - set(languages))]
    if missing:
        raise Invalid("Some submissions do not exist.", fields={"submissions": [f"unknown: {', '.join(missing[:20])}"]})
    return found


def rejudge_request(*, selector: dict, actor, now) -> RejudgeOperation:
    """Fix the operation's submissions now (`selector` as the API's body, already
    validated to hold exactly one way of choosing); the periodic step enqueues them."""
    if "problemId" in selector:
        chosen = _problem_submissions(selector["problemId"])
    elif "nodeId" in selector:
        chosen = _node_submissions(selector["nodeId"], selector["since"], selector.get("until"))
    else:
        chosen = _listed_submissions(selector["submissions"])
    with transaction.atomic(durable=True):
        operation = RejudgeOperation.objects.create(
            selector=_as_json(selector), total=len(chosen), requested_by=actor, created_at=now,
            state=RejudgeState.RUNNING if chosen else RejudgeState.DONE, finished_at=None if chosen else now)
        RejudgeItem.objects.bulk_create(
            [RejudgeItem(operation=operation, submission_type=t, submission_id=pk, pool=pool) for t, pk, pool in chosen],
            batch_size=1000)
    logger.info("bulk rejudge requested", extra={"rejudge": operation.pk, "total": operation.total,
                                                 "selector": operation.selector})
    return operation


def _as_json(selector: dict) -> dict:
    # Moments in UTC with Z, whichever zone they were typed in (a page's: `kece.timezones`).
    return {key: iso(value) if hasattr(value, "astimezone") else value for key, value in selector.items()}


def rejudge_cancel(*, rejudge_id: int, now) -> RejudgeOperation:
    """Stop enqueuing. Jobs already queued or judged stay: cancelling them would leave their
    submissions with a cancelled current job."""
    if not RejudgeOperation.objects.filter(pk=rejudge_id).exists():
        raise NotFound()
    if RejudgeOperation.objects.filter(pk=rejudge_id, state=RejudgeState.RUNNING).update(
            state=RejudgeState.CANCELLED, finished_at=now):
        logger.info("bulk rejudge cancelled", extra={"rejudge": rejudge_id})
    return RejudgeOperation.objects.get(pk=rejudge_id)


def rejudge_progress(operation) -> dict:
    """{id, state, total, enqueued, judged, changed, skipped} from the items and their jobs
    (one statement). judged counts terminal jobs and skipped items; changed, the jobs whose
    verdict differs from the submission's before."""
    jobs = JudgeJob.objects.filter(pk=OuterRef("job_id"))
    figures = RejudgeItem.objects.filter(operation=operation).annotate(
        job_state=Subquery(jobs.values("state")[:1]),
        job_verdict=Subquery(jobs.annotate(verdict=KT("result__verdict")).values("verdict")[:1]),
    ).aggregate(
        enqueued=Count("id", filter=Q(job_id__isnull=False)),
        skipped=Count("id", filter=Q(skipped=True)),
        judged=Count("id", filter=Q(job_state__in=JobState.TERMINAL)),
        changed=Count("id", filter=Q(job_state=JobState.COMPLETED) & ~Q(job_verdict=F("verdict_before"))),
    )
    return {"id": operation.pk, "state": operation.state, "total": operation.total, **figures,
            "judged": figures["judged"] + figures["skipped"]}


# --- the periodic step ---------------------------------------------------------------------------

def _enqueue(item, *, now) -> bool:
    """Queue one item's rejudge in a transaction of its own; False if another runner took
    it first. A submission deleted meanwhile, or one no rejudge takes, is skipped."""
    with transaction.atomic(durable=True):
        # The guarded write takes the item: a second runner finds it taken and moves on.
        if not RejudgeItem.objects.filter(pk=item.pk, job_id__isnull=True, skipped=False).update(job_id=0):
            return False
        try:
            submission = locked_live_submission(item.submission_type, item.submission_id)
        except NotFound:
            submission = None
        if submission is None or rejudge_refusal(submission) is not None:
            # Deleted meanwhile, or one no rejudge takes (listed by id): skipped, as a
            # single rejudge would refuse it.
            RejudgeItem.objects.filter(pk=item.pk).update(job_id=None, skipped=True)
            return True
        job = rejudge_locked(submission, now=now, priority_class=PriorityClass.REJUDGE)
        RejudgeItem.objects.filter(pk=item.pk).update(job_id=job.pk, verdict_before=submission.verdict or "")
    return True


def _advance(operation, *, now, batch: int) -> int:
    items = RejudgeItem.objects.filter(operation=operation)
    waiting = items.filter(job_id__isnull=True, skipped=False)
    pools = set(waiting.values_list("pool", flat=True).distinct())
    if not pools:
        progress = rejudge_progress(operation)
        if progress["judged"] >= operation.total and RejudgeOperation.objects.filter(
                pk=operation.pk, state=RejudgeState.RUNNING).update(state=RejudgeState.DONE, finished_at=now):
            logger.info("bulk rejudge done", extra={"rejudge": operation.pk, "total": operation.total,
                                                    "changed": progress["changed"]})
        return 0
    queued = JudgeJob.objects.filter(pk__in=Subquery(items.filter(job_id__isnull=False).values("job_id")),
                                     state=JobState.QUEUED).count()
    room = batch - queued
    open_pools = sorted(pool for pool in pools if not pressure.pool_throttling(pool, now=now))
    if room <= 0 or not open_pools:
        return 0
    enqueued = 0
    for item in waiting.filter(pool__in=open_pools).order_by("id")[:room]:
        # Read per item: a cancel takes effect before the next one, not after the batch.
        if not RejudgeOperation.objects.filter(pk=operation.pk, state=RejudgeState.RUNNING).exists():
            break
        enqueued += _enqueue(item, now=now)
    return enqueued


def rejudges_advance(*, now, batch: int | None = None) -> int:
    """One pass over the running operations, oldest first; the number of items enqueued."""
    batch = batch or settings.KECE_REJUDGE_BATCH
    return sum(_advance(operation, now=now, batch=batch)
               for operation in RejudgeOperation.objects.filter(state=RejudgeState.RUNNING).order_by("id"))
