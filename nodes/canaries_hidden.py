"""Hidden canaries: the self-check's canary programs slipped into a node's ordinary work.

A self-check's jobs are marked `DIAGNOSTIC`, so a tampered agent can judge them honestly
and answer anything on real work. So the server also gives each judging node, now and then,
a canary program as an ordinary judge job (`nodes.hidden_jobs`): about one in
`KECE_CANARY_RATE` of the judge jobs it claims (the gap drawn at random around the rate,
so counting jobs does not find it), and at least one every `KECE_CANARY_MIN_INTERVAL_S`
while it judges. A node that has just disagreed with a peer on a verdict
(`nodes.cross_checks`) gets one at the next pass. Its source carries a comment of random
length, so its digest and size are never those of the self-check's program. The server
grades the verdict as the self-check does; a wrong one quarantines the node
(`canary_mismatch`) and settles any open disagreement of the node's in its peers' favour.

Why a periodic step plants them, bound to the node, instead of the claim creating them:
the canary's package must be imported and its program read from disk (`nodes.canaries`),
which may not happen under the claim's host-group and node locks, and a claim that wrote
rows beyond the jobs it leases would lose its one-statement shape (`judging.services.claim`).
A bound job is claimed by the ordinary claim like any other, under the ordinary lock order.

What a node could still use to recognise one: the canary problem's manifest and test data
are those of the self-check (a node that remembers them from its DIAGNOSTIC jobs could link
them), and a canary's source, which a node must read to run it. A node that judges what it
recognises honestly and lies on the rest is what cross-checking catches.
"""

import logging
import random
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from judging.locking import lock_node
from judging.models import JobKind, JobState, JudgeJob
from judging.selectors import ready_nodes
from judging.services.problems import PackageError
from judging.system import system_user
from nodes.canaries import canaries_for
from nodes.hidden_jobs import hidden_job_create, hidden_job_cancel
from nodes.models import CrossCheck, HiddenCanary
from nodes.quarantine import node_quarantine_locked

logger = logging.getLogger("kece.canaries")

CANARY_MISMATCH = "canary_mismatch"

# Line comments of the pools whose source may end with one. SQL is left as it is: a
# trailing comment would be a statement of its own to some clients.
_COMMENT = {"python": "#", "cpp": "//", "java": "//", "arkts": "//"}


def _salted(code: str, pool: str) -> str:
    mark = _COMMENT.get(pool)
    if mark is None:
        return code
    return f"{code.rstrip()}\n{mark} {secrets.token_hex(random.randint(4, 24))}\n"


def _next_after() -> int:
    rate = settings.KECE_CANARY_RATE
    return random.randint(1, 2 * rate - 1) if rate else 0


def _jobs_judged_since(node_id: int, since) -> int:
    """Judge jobs the node claimed since `since` (not its hidden ones)."""
    jobs = JudgeJob.objects.filter(last_node_id=node_id, kind=JobKind.JUDGE, bound_node__isnull=True)
    if since is not None:
        jobs = jobs.filter(started_at__gte=since)
    return jobs.count()


def _disputed_since(node_id: int, since) -> bool:
    disputes = CrossCheck.objects.filter(Q(original_node_id=node_id) | Q(check_node_id=node_id), agreed=False,
                                         blamed_node_id__isnull=True)
    if since is not None:
        disputes = disputes.filter(settled_at__gt=since)
    return disputes.exists()


def canary_due(node, *, now) -> bool:
    """Whether the node should get a canary now: none of its canaries is open, and it has
    disagreed with a peer since the last one, or claimed its drawn number of judge jobs
    since, or judged at all and the minimum interval has passed."""
    last = HiddenCanary.objects.filter(node_id=node.pk).order_by("-planted_at", "-id").first()
    if last is not None and last.graded_at is None:
        return False
    since = last.planted_at if last is not None else node.self_check_finished_at
    if _disputed_since(node.pk, since):
        return True
    judged = _jobs_judged_since(node.pk, since)
    if judged == 0:
        return False
    threshold = last.next_after if last is not None else _next_after()
    if settings.KECE_CANARY_RATE and judged >= threshold:
        return True
    interval = settings.KECE_CANARY_MIN_INTERVAL_S
    return bool(interval) and (since is None or now - since >= timedelta(seconds=interval))


def canaries_plant(*, now) -> list[int]:
    """Plant a canary for every judging node that is due one; returns the canary jobs."""
    if not (settings.KECE_CANARY_RATE or settings.KECE_CANARY_MIN_INTERVAL_S):
        return []
    planted, by_pool = [], {}
    for node in ready_nodes(now=now):
        if not canary_due(node, now=now):
            continue
        if node.pool not in by_pool:
            try:
                by_pool[node.pool] = canaries_for(node.pool)  # files: before any transaction
            except (PackageError, OSError):
                logger.exception("canaries unusable", extra={"pool": node.pool})
                by_pool[node.pool] = []
        if not by_pool[node.pool]:
            continue
        canary = random.choice(by_pool[node.pool])
        code = _salted(canary.path.read_text(encoding="utf-8"), node.pool)
        owner = system_user()
        with transaction.atomic(durable=True):
            locked = lock_node(node.pk)  # two planting passes at once plant one canary
            if locked is None or HiddenCanary.objects.filter(node_id=node.pk, graded_at__isnull=True).exists():
                continue
            from judging.services.snapshot import job_snapshot

            snapshot = job_snapshot(problem=canary.problem, manifest=canary.manifest, pool=node.pool,
                                    language=node.pool, source=canary.source)
            job = hidden_job_create(
                user_id=owner.pk, problem_id=canary.problem.pk, submission_type=canary.problem.kind,
                language=node.pool, code=code, snapshot=snapshot, manifest_id=canary.manifest.pk, pool=node.pool,
                runtime_spec=node.runtime_spec, node_id=node.pk, now=now)
            HiddenCanary.objects.create(node_id=node.pk, job_id=job.pk, program=canary.name, expect=canary.expect,
                                        next_after=_next_after(), planted_at=now)
        planted.append(job.pk)
        logger.info("canary planted", extra={"node": node.pk, "job": job.pk, "program": canary.name})
    return planted


def _blame(node_id: int) -> None:
    """A failed canary settles the node's open disagreements: it was the liar."""
    CrossCheck.objects.filter(Q(original_node_id=node_id) | Q(check_node_id=node_id), agreed=False,
                              blamed_node_id__isnull=True).update(blamed_node_id=node_id)


def canaries_grade(*, now) -> list[int]:
    """Grade the canaries whose job has ended; quarantine a node that answered one wrongly.
    Returns the nodes quarantined."""
    quarantined = []
    open_canaries = list(HiddenCanary.objects.filter(graded_at__isnull=True).order_by("id"))
    jobs = JudgeJob.objects.in_bulk([c.job_id for c in open_canaries])
    for canary in open_canaries:
        job = jobs.get(canary.job_id)
        if job is not None and job.state in JobState.ACTIVE:
            continue
        verdict = (job.result or {}).get("verdict", "") if job is not None and job.state == JobState.COMPLETED else ""
        # Only a judgement is graded: an infrastructure error is the infra-error rule's.
        ok = (verdict == canary.expect) if verdict else None
        with transaction.atomic(durable=True):
            node = lock_node(canary.node_id)
            if not HiddenCanary.objects.filter(pk=canary.pk, graded_at__isnull=True).update(
                    verdict=verdict, ok=ok, graded_at=now):
                continue
            if ok is False and node is not None:
                _blame(node.pk)
                reason = f"{CANARY_MISMATCH}: {canary.program} expected {canary.expect}, got {verdict} (job {job.pk})"
                if node_quarantine_locked(node, reason=reason, now=now):
                    quarantined.append(node.pk)
        logger.log(logging.WARNING if ok is False else logging.INFO, "canary graded",
                   extra={"node": canary.node_id, "job": canary.job_id, "program": canary.program,
                          "expect": canary.expect, "verdict": verdict or None})
    return quarantined


def canaries_withdraw(*, now) -> int:
    """Cancel the queued canaries of nodes that may no longer judge: nothing else would take
    them, and the node gets a fresh one when it judges again."""
    judging = set(ready_nodes(now=now).values_list("pk", flat=True))
    withdrawn = 0
    for canary in HiddenCanary.objects.filter(graded_at__isnull=True).exclude(node_id__in=judging):
        with transaction.atomic(durable=True):
            withdrawn += hidden_job_cancel(canary.job_id, now=now, reason="node_not_judging")
    return withdrawn
