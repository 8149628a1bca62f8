"""Failed work: judge jobs whose submission now shows SYSTEM_ERROR, and outbox events that died,
found by pool, node, time and error, and sent round again.

A failed job goes round again as what it is: a submission judged again, through the bulk
rejudge (`judging.services.bulk_rejudge`): a tracked operation, enqueued a batch at a time at
REJUDGE class and held back from a pool that is throttling, so re-queueing an outage's worth
of failures never stands between a pool and the students' fresh work. A dead event is made
due again with its attempts reset (`events_retry`); the dispatcher applies it as it applies
every event, idempotently.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef

from judging.models import (
    SUBMISSION_MODELS, EventState, JobKind, JobState, JudgeJob, RejudgeItem, RejudgeState, SettlementEvent,
)

logger = logging.getLogger("kece.failed_work")


@dataclass(frozen=True)
class FailedFilter:
    pool: str = ""
    node_id: int | None = None  # the node that held the last lease
    since: datetime | None = None
    until: datetime | None = None
    error: str = ""  # a job's error code exactly; an event's error text contains it


def _current(submission_type: str):
    """The failed job is what its (live) submission shows now, not a generation since replaced."""
    model = SUBMISSION_MODELS[submission_type]
    return Exists(model.objects.filter(pk=OuterRef("submission_id"), current_judge_job_id=OuterRef("pk"),
                                       deleted_at__isnull=True))


def _matching(rows, found: FailedFilter, *, at: str, error_lookup: str, job: str = ""):
    """`rows` narrowed by the filter: pool and node on the job (`job` is the path to it),
    the time range on `at`, the error with `error_lookup`."""
    conditions = {f"{job}pool": found.pool, f"{job}last_node_id": found.node_id, f"{at}__gte": found.since,
                  f"{at}__lt": found.until, error_lookup: found.error}
    return rows.filter(**{lookup: value for lookup, value in conditions.items() if value})


def _waiting_in_a_rejudge():
    """The job's submission is already on its way round again: an item of a running rejudge
    not yet enqueued (the operation queues a batch at a time)."""
    return Exists(RejudgeItem.objects.filter(
        submission_type=OuterRef("submission_type"), submission_id=OuterRef("submission_id"), job_id__isnull=True,
        skipped=False, operation__state=RejudgeState.RUNNING))


def failed_jobs(found: FailedFilter):
    """The FAILED judge jobs that are their submission's current result, newest first. Hidden
    jobs (a node's canary, a cross-check: bound to one node) are the server's own checks, not
    anyone's submission: the node's page shows them. Those a running rejudge will queue are
    left out: sent round a second time, each would cancel the first one's job."""
    jobs = _matching(JudgeJob.objects.filter(kind=JobKind.JUDGE, state=JobState.FAILED, bound_node__isnull=True),
                     found, at="finished_at", error_lookup="error").exclude(_waiting_in_a_rejudge())
    by_type = None
    for submission_type in SUBMISSION_MODELS:
        part = jobs.filter(_current(submission_type), submission_type=submission_type)
        by_type = part if by_type is None else by_type | part
    # Only what the list, the confirmation and the requeue read: not the job's snapshot and
    # result, kilobytes a row (an outage's thousands of failures made the page take seconds
    # and "all that match" hundreds of megabytes).
    return by_type.order_by("-finished_at", "-id").only(*_LISTED)


_LISTED = ("id", "kind", "submission_type", "submission_id", "generation", "pool", "last_node_id", "error",
           "error_message", "finished_at", "attempts", "state")


def dead_events(found: FailedFilter):
    """The outbox events that gave up, newest first, with the job they came from."""
    events = _matching(SettlementEvent.objects.filter(state=EventState.DEAD), found, at="created_at",
                       error_lookup="last_error__contains", job="job__")
    return events.select_related("job").order_by("-id")


def requeue_selector(jobs) -> dict:
    """The bulk rejudge's selector for these failed jobs' submissions (the admin API's body)."""
    return {"submissions": [{"type": job.submission_type, "id": job.submission_id} for job in jobs]}
