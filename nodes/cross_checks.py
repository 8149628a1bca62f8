"""Cross-checks: a sample of real verdicts judged again on another node of the pool.

1. When a judge job's result takes effect, about one in `KECE_CROSS_CHECK_RATE` is chosen:
   its settle writes a cross-check record with the original node, verdict and score, in
   the same transaction (`judgement_sampled`, a `judging.hooks` handler), so a chosen job
   is never lost.
2. A periodic step (`cross_checks_queue`) picks a ready peer of the pool at random, never
   the node that judged the original, and queues the same source on the same manifest as a
   hidden judge job bound to that peer (`nodes.hidden_jobs`): a submission of the system
   account, so the student's result never changes. No peer: the record is given up.
3. When the check job ends, `cross_checks_grade` compares verdict and score. A disagreement
   counts against both nodes, since which of the two lied is not known: both get a hidden
   canary at the next pass (`nodes.canaries_hidden`), and a node that then fails one is
   blamed for the disagreement, which stops counting against its peer. A node with
   `KECE_CROSS_CHECK_QUARANTINE_AFTER` disagreements that no canary settled, since its last
   passed self-check, is quarantined (`cross_check`). In a pool of two nodes that disagree
   that often and pass their canaries, both are: the server cannot tell which one to trust.
"""

import logging
import random
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from judging.locking import lock_nodes
from judging.models import SUBMISSION_MODELS, JobState, JudgeJob
from judging.selectors import ready_nodes
from judging.system import system_user
from nodes.hidden_jobs import hidden_job_cancel, hidden_job_create
from nodes.models import CrossCheck
from nodes.quarantine import node_quarantine_locked

logger = logging.getLogger("kece.cross_checks")

CROSS_CHECK = "cross_check"
# A chosen job whose pool had no other ready node for this long is not checked.
GIVE_UP_AFTER = timedelta(hours=1)


def judgement_sampled(job, *, now) -> None:
    """Called by settle, in its transaction, for every judge job whose result took effect:
    choose about one in `KECE_CROSS_CHECK_RATE` (an insert only; nothing is locked)."""
    rate = settings.KECE_CROSS_CHECK_RATE
    if not rate or random.randrange(rate):
        return
    result = job.result or {}
    CrossCheck.objects.create(original_job_id=job.pk, original_node_id=job.settled_node_id,
                              original_verdict=result.get("verdict", ""), original_score=result.get("score"),
                              created_at=now)


def _peer(record, job, *, now):
    peers = list(ready_nodes(now=now).filter(pool=job.pool, runtime_spec=job.runtime_spec)
                 .exclude(pk=record.original_node_id).values_list("pk", flat=True))
    return random.choice(peers) if peers else None


def cross_checks_queue(*, now) -> list[int]:
    """Queue the check job of every chosen record that has none yet; returns the jobs."""
    queued = []
    for record in CrossCheck.objects.filter(check_job_id__isnull=True, settled_at__isnull=True).order_by("id"):
        job = JudgeJob.objects.filter(pk=record.original_job_id).first()
        submission = job and SUBMISSION_MODELS[job.submission_type].objects.filter(
            pk=job.submission_id, deleted_at__isnull=True).first()
        # A job whose details retention pruned has lost its snapshot's case list: a check
        # judged from what is left would compare nothing with something.
        checkable = submission is not None and job.details_pruned_at is None
        peer = _peer(record, job, now=now) if checkable else None
        if peer is None:
            if not checkable or now - record.created_at >= GIVE_UP_AFTER:
                CrossCheck.objects.filter(pk=record.pk, check_job_id__isnull=True).update(settled_at=now)
            continue
        owner = system_user()
        try:
            with transaction.atomic(durable=True):
                check = hidden_job_create(
                    user_id=owner.pk, problem_id=submission.problem_id, submission_type=job.submission_type,
                    language=submission.language, code=submission.code, snapshot=job.snapshot,
                    manifest_id=job.manifest_id, pool=job.pool, runtime_spec=job.runtime_spec, node_id=peer, now=now)
                if not CrossCheck.objects.filter(pk=record.pk, check_job_id__isnull=True).update(
                        check_job_id=check.pk, check_node_id=peer):
                    raise IntegrityError("queued by another pass")
        except IntegrityError:
            continue
        queued.append(check.pk)
        logger.info("cross-check queued", extra={"job": job.pk, "check": check.pk, "node": peer})
    return queued


def _disagreements(node) -> int:
    """Disagreements that count against the node: since its last passed self-check, not
    settled against its peer by a canary."""
    found = CrossCheck.objects.filter(Q(original_node_id=node.pk) | Q(check_node_id=node.pk), agreed=False).filter(
        Q(blamed_node_id__isnull=True) | Q(blamed_node_id=node.pk))
    if node.self_check_finished_at is not None:
        found = found.filter(settled_at__gt=node.self_check_finished_at)
    return found.count()


def cross_checks_grade(*, now) -> list[int]:
    """Compare every check job that has ended with its original; quarantine the nodes that
    disagreed too often. Returns the nodes quarantined."""
    quarantined = []
    records = list(CrossCheck.objects.filter(check_job_id__isnull=False, settled_at__isnull=True).order_by("id"))
    jobs = JudgeJob.objects.in_bulk([r.check_job_id for r in records])
    for record in records:
        job = jobs.get(record.check_job_id)
        if job is not None and job.state in JobState.ACTIVE:
            continue
        # Only a judgement is compared: a check that failed or was cancelled is given up.
        result = (job.result or {}) if job is not None and job.state == JobState.COMPLETED else None
        verdict, score = (result.get("verdict", ""), result.get("score")) if result is not None else ("", None)
        agreed = (verdict == record.original_verdict and score == record.original_score) if result is not None else None
        with transaction.atomic(durable=True):
            nodes = lock_nodes([record.original_node_id, record.check_node_id])
            if not CrossCheck.objects.filter(pk=record.pk, settled_at__isnull=True).update(
                    check_verdict=verdict, check_score=score, agreed=agreed, settled_at=now):
                continue
            if agreed is False:
                for node in nodes.values():
                    count = _disagreements(node)
                    if count >= settings.KECE_CROSS_CHECK_QUARANTINE_AFTER and node_quarantine_locked(
                            node, now=now, reason=f"{CROSS_CHECK}: disagreed with its peers on {count} verdicts "
                                                  f"(last: job {record.original_job_id})"):
                        quarantined.append(node.pk)
        if agreed is False:
            logger.warning("cross-check disagreement", extra={
                "job": record.original_job_id, "node": record.original_node_id, "verdict": record.original_verdict,
                "check": record.check_job_id, "checkNode": record.check_node_id, "checkVerdict": verdict})
    return quarantined


def cross_checks_withdraw(*, now) -> int:
    """Cancel the queued check jobs of peers that may no longer judge; the record is given up."""
    judging = set(ready_nodes(now=now).values_list("pk", flat=True))
    withdrawn = 0
    for record in CrossCheck.objects.filter(check_job_id__isnull=False, settled_at__isnull=True).exclude(
            check_node_id__in=judging):
        with transaction.atomic(durable=True):
            withdrawn += hidden_job_cancel(record.check_job_id, now=now, reason="node_not_judging")
    return withdrawn


def recent_disagreements(node_id: int, *, limit: int = 10) -> list[CrossCheck]:
    """The node's latest disagreements, for its console page."""
    return list(CrossCheck.objects.filter(Q(original_node_id=node_id) | Q(check_node_id=node_id), agreed=False)
                .order_by("-settled_at", "-id")[:limit])
