"""settle: a node posts the outcome of its lease; at most one outcome per lease takes effect."""

import functools
import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction

from judging import hooks
from judging.clock import require_agreeing_clock
from judging.identity import NodeIdentity, check_node_identity
from judging.locking import host_group_row, job_rows, lock_jobs, lock_together, node_row, save_locked, \
    save_locked_together, submission_row
from judging.models import VERDICTS, JobKind, JobState, Verdict
from judging.selectors import ready_nodes, sources_with_commit
from judging.services import conduct, job_meta, outcomes
from judging.services.claim import ClaimResult, carried_jobs, claim_locked, node_host_group_id, record_claim, \
    running_counts, running_counts_read
from judging.services.leases import was_leased_to
from judging.services.snapshot import judged_data_digest
from judging.timing import now_under_locks
from judging.wakeups import publish_after_commit
import kece.metrics as metrics
from kece.errors import DomainError, Invalid, LeaseLost, ResultConflict, Superseded

logger = logging.getLogger("kece.settle")

JUDGED, INFRA_ERROR, RELEASED = "JUDGED", "INFRA_ERROR", "RELEASED"
OUTCOMES = (JUDGED, INFRA_ERROR, RELEASED)
COMPILE_OUTPUT_LIMIT = 64 * 1024


@dataclass(frozen=True)
class CaseResult:
    ordinal: int
    verdict: str
    time_ms: int = 0
    memory_kb: int = 0
    score: int = 0

    def as_dict(self) -> dict:
        """`dataclasses.asdict`, without its deep copy of every field (one a case, per result)."""
        return {"ordinal": self.ordinal, "verdict": self.verdict, "time_ms": self.time_ms,
                "memory_kb": self.memory_kb, "score": self.score}


@dataclass(frozen=True)
class SettleRequest:
    job_id: int
    lease_epoch: int
    outcome: str
    verdict: str = ""
    score: int = 0
    time_ms: int = 0
    memory_kb: int = 0
    compile_output: str = ""
    cases: tuple[CaseResult, ...] = ()
    error: str = ""
    message: str = ""
    checks: tuple = field(default=())  # diagnostic items: ({name, ok, detail}, …)

    def canonical(self) -> dict:
        if self.outcome == JUDGED:
            return {
                "outcome": JUDGED, "verdict": self.verdict, "score": self.score, "timeMs": self.time_ms,
                "memoryKb": self.memory_kb, "compileOutput": self.compile_output[:COMPILE_OUTPUT_LIMIT],
                "cases": [c.as_dict() for c in sorted(self.cases, key=lambda c: c.ordinal)],
                "checks": [dict(c) for c in self.checks],
            }
        if self.outcome == INFRA_ERROR:
            return {"outcome": INFRA_ERROR, "error": self.error, "message": self.message}
        return {"outcome": RELEASED}

    def digest(self) -> str:
        """The result digest is the server's own: sha-256 of the canonical result."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


def _validate_judged(job, request: SettleRequest) -> None:
    if request.verdict not in VERDICTS:
        raise Invalid(f"verdict must be one of {' '.join(Verdict.values)}", fields={"verdict": ["unknown verdict"]})
    if not 0 <= request.score <= 100:
        raise Invalid("score must be 0…100", fields={"score": ["out of range"]})
    weights = {c["ordinal"]: c["weight"] for c in (job.snapshot.get("cases") or [])}
    if not weights and (job.kind == JobKind.JUDGE or job.snapshot.get("sql")):
        weights = {1: 100}  # SQL jobs (a mysql canary too) are one comparison worth the whole score
    seen = set()
    for case in request.cases:
        if case.ordinal not in weights or case.ordinal in seen:
            raise Invalid(f"case {case.ordinal} is not a case of this job", fields={"cases": ["unknown ordinal"]})
        seen.add(case.ordinal)
        if case.verdict not in VERDICTS or not 0 <= case.score <= weights[case.ordinal]:
            raise Invalid(f"case {case.ordinal}: bad verdict or score", fields={"cases": ["invalid case result"]})
    # A judge job's score is what its cases earned: without any (a compile error) it is 0.
    # (A diagnostic reports its checks instead, and 100 when they pass.)
    if (request.cases or job.kind == JobKind.JUDGE) and sum(c.score for c in request.cases) != request.score:
        raise Invalid("score must be the sum of the case scores", fields={"score": ["not the sum of the cases"]})


def job_settle(*, identity: NodeIdentity, request: SettleRequest, now) -> str:
    """Apply a node's result; returns settled, duplicate, requeued or failed.

    1. Read the job's kind and submission without locks (to know what to lock).
    2. Lock node (shared: settles of one node do not queue behind each other) →
       submission → job; re-check credential and session on the node row.
    3. Same lease already settled: the same digest is a `duplicate`, another one a conflict.
    4. Refuse a superseded job (pointer moved, cancelled) and any lease that is not this
       node's, this session's, this epoch's and unexpired.
    5. Write the outcome; a terminal one writes the submission's result and the outbox
       events in this same transaction.
    """
    require_agreeing_clock()
    status, _ = _settle(identity, request, now=now, claim_slots=None, with_sources=False)
    return status


def _counting_refusals(function):
    """A result post refused with a contract error is counted by its code."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except DomainError as error:
            metrics.result_refused(error.code)
            raise
    return wrapper


def job_settle_and_claim(*, identity: NodeIdentity, request: SettleRequest, now, free_slots: int,
                         with_sources: bool = False) -> tuple[str, ClaimResult | None]:
    """`job_settle`, then lease up to `free_slots` jobs to the node in the same transaction:
    the claim a result post may carry. The host group and the node are locked first, as a
    claim needs them: shared for a one-for-one replacement (`_settle_once`), else
    exclusively; the rest is `job_settle`'s.

    A refused result leases nothing. Neither does a RELEASED one (the node is giving work
    back) nor a diagnostic one (its verdict may have just changed whether the node may
    judge): their claim is empty, and the node's long-poll claim takes the slot. The
    settled job itself is never handed back. A `duplicate` (the same post again: its answer
    was lost) first gets back the jobs that answer held, if the node has not renewed them
    (`carried_jobs`), and leases only for the slots asked beyond them. The claim is None
    (not attempted) only if the node's host group is not the one it authenticated with:
    the caller claims on its own then. `with_sources`: the jobs' sources are read with the
    COMMIT, as a claim's may be (`job_claim`)."""
    require_agreeing_clock()
    return _settle(identity, request, now=now, claim_slots=free_slots, with_sources=with_sources)


class _StaleMeta(Exception):
    """The cached job meta did not match the locked row: read it again."""


class _NotAReplacement(Exception):
    """A post taken for a one-for-one replacement was not one: do it again exclusively."""


@_counting_refusals
def _settle(identity: NodeIdentity, request: SettleRequest, *, now, claim_slots: int | None, with_sources: bool):
    if request.outcome not in OUTCOMES:
        raise Invalid("outcome must be JUDGED, INFRA_ERROR or RELEASED", fields={"outcome": ["unknown outcome"]})
    digest = request.digest()
    fresh = False
    # A judged result whose freed slot asks for the next job is, almost always, a
    # one-for-one replacement: first try it as one.
    replacing = claim_slots == 1 and request.outcome == JUDGED
    while True:
        try:
            return _settle_once(identity, request, now=now, claim_slots=claim_slots, digest=digest, fresh=fresh,
                                replacing=replacing, with_sources=with_sources)
        except _StaleMeta:
            if fresh:
                raise
            job_meta.forget(request.job_id)
            fresh = True
        except _NotAReplacement:
            replacing = False


# What a settle reads of the submission it locks: the current-job pointer and what its events
# name. Not the code (up to 256 KiB) nor the last verdict's cases and compiler output, which
# it only overwrites.
_SETTLE_READS = ("id", "user_id", "problem_id", "lesson_practice_id", "exam_id", "current_judge_job_id")


def _settle_once(identity: NodeIdentity, request: SettleRequest, *, now, claim_slots: int | None, digest: str,
                 fresh: bool, replacing: bool, with_sources: bool):
    """One attempt. `replacing`: take the host group and the node in SHARE mode, so that the
    result posts of one group do not queue behind each other. That holds only when the post
    frees a slot this node holds in this group (a RUNNING job of the node, counted in the
    group) and asks for one job in its place: the counts cannot rise, whatever other such
    posts do meanwhile, and everything that could raise them or change the limits (a claim
    for more, a change to the group or the node) waits for the shared holders. Anything else
    (a repeated post, a job counted in another group) is done again exclusively."""
    meta = job_meta.job_meta(request.job_id, fresh=fresh)
    if meta is None:
        raise LeaseLost("No such job for this node.")
    claims = bool(claim_slots) and meta.kind == JobKind.JUDGE and request.outcome != RELEASED
    replacing = replacing and claims
    group_id = (identity.host_group_id or node_host_group_id(identity.node_id)) if claims else None
    # A diagnostic result writes the node's self-check, an INFRA_ERROR the node's run of
    # errors (`conduct`), and a claim counts its slots: all need the node exclusively.
    infra = request.outcome == INFRA_ERROR and meta.kind == JobKind.JUDGE
    node_shared = replacing or (group_id is None and meta.kind != JobKind.DIAGNOSTIC and not infra)
    with transaction.atomic(durable=True):
        # Every lock's key is known up front, so they go to the server together, except an
        # error's: one that quarantines the node refunds the other jobs of its run, which
        # the node row names, locked with this one in one ascending acquisition.
        locks = [host_group_row(group_id, shared=replacing)] if group_id is not None else []
        locks.append(node_row(identity.node_id, shared=node_shared))
        if meta.kind == JobKind.JUDGE:
            locks.append(submission_row(meta.submission_type, meta.submission_id, names=_SETTLE_READS))
        if not infra:
            locks.append(job_rows([request.job_id]))
        # A replacement reads the running counts with its locks, saving the claim a round
        # trip: the job it settles is still RUNNING in them.
        counts = [running_counts_read(identity.node_id, group_id)] if replacing else []
        taken = lock_together(*locks, reads=counts)
        running = _without_settled(running_counts(taken.pop())) if replacing else None
        group = taken.pop(0) if group_id is not None else None
        node = taken.pop(0)
        check_node_identity(node, identity)
        submission = taken.pop(0) if meta.kind == JobKind.JUDGE else None
        others = lock_jobs([request.job_id, *conduct.refund_candidates(node, request.job_id)]) if infra \
            else taken.pop(0)
        job = others.pop(request.job_id, None)
        if job is None:
            raise LeaseLost("No such job for this node.")
        if job_meta.meta_of(job) != meta:
            raise _StaleMeta()
        counted_in_group = job.host_group_id

        status = _check_and_apply(job, node, submission, identity, request, now=now, digest=digest)
        if replacing and (status != "settled" or counted_in_group != group.pk):
            raise _NotAReplacement()
        if infra and status in ("requeued", "failed"):
            conduct.infra_error_recorded(node, job, others, now=now)
        claim = None
        if claim_slots is not None:
            claim = ClaimResult(desired_state=node.desired_state, reason="not_after_this_result")
        if group is not None and node.host_group_id != group.pk:
            claim = None  # moved to another host group meanwhile: the caller claims on its own
        elif group is not None:
            # A repeated post whose first answer was lost: the jobs that answer held come
            # again, rather than waiting out their leases while they hold the node's slots.
            again = carried_jobs(node, session_epoch=identity.session_epoch, carried_by=job.pk,
                                 now=now_under_locks(now)) if status == "duplicate" else []
            # The pick comes after the settle's writes, never with the locks: past the end
            # of the queue a SKIP LOCKED scan also locks the claim index's next entries, the
            # RUNNING jobs of other posts; two posts whose own job were still RUNNING there
            # would each wait for the other to write it.
            claim = claim_locked(node, group, free_slots=claim_slots - len(again), now=now, carried_by=job.pk,
                                 running=running)
            claim.jobs = again + claim.jobs
            if with_sources and claim.jobs:
                claim.sources = sources_with_commit(claim.jobs)
            if again:
                logger.info("carried jobs sent again", extra={"job": job.pk, "node": node.pk,
                                                              "jobs": [j.pk for j in again]})
        if status != "duplicate" and not (claim and claim.jobs):
            # A slot of this node and host group is free again (unless the carried claim
            # took it back): a waiting claim that was refused as full may now take work.
            publish_after_commit(job.pool)
    if infra and status in ("requeued", "failed"):
        metrics.infra_error(job.pool, node.name)
    if claim is not None and group is not None and node.host_group_id == group.pk:
        record_claim(node.pool, claim, now=now)
    if status == "settled" and meta.kind == JobKind.JUDGE and node.infra_error_jobs:
        conduct.judgement_recorded(node.pk)
    logger.info("result accepted", extra={"job": job.pk, "leaseEpoch": request.lease_epoch, "outcome": request.outcome,
                                          "status": status, "verdict": request.verdict or None, "node": node.pk,
                                          "pool": job.pool})
    return status, claim


def _without_settled(running: tuple[int, int]) -> tuple[int, int]:
    """A replacement's running counts, read before its settle: one less each for the job it
    settles, which was RUNNING on this node in this group (else it is no replacement, and
    is done again exclusively)."""
    node_running, group_running = running
    return node_running - 1, group_running - 1


def _check_and_apply(job, node, submission, identity: NodeIdentity, request: SettleRequest, *, now,
                     digest: str) -> str:
    if job.settled_lease_epoch == request.lease_epoch and job.settled_node_id == node.pk:
        if job.settled_digest == digest:
            return "duplicate"
        raise ResultConflict()
    if job.state == JobState.CANCELLED or (
        job.kind == JobKind.JUDGE and (submission is None or submission.current_judge_job_id != job.pk)
    ):
        if was_leased_to(job, node.pk, request.lease_epoch):
            raise Superseded()
        raise LeaseLost()
    if (
        job.state != JobState.RUNNING or job.node_id != node.pk or job.lease_epoch != request.lease_epoch
        or job.session_epoch != identity.session_epoch or job.lease_until is None
        or job.lease_until <= now_under_locks(now)
    ):
        raise LeaseLost()
    if request.outcome == JUDGED:
        _validate_judged(job, request)
    return _apply(job, node, submission, request, now=now, digest=digest)


def _apply(job, node, submission, request: SettleRequest, *, now, digest: str) -> str:
    node_id = node.pk
    if request.outcome == RELEASED:
        outcomes.record_settlement(job, node_id=node_id, lease_epoch=request.lease_epoch, digest=digest,
                                   status="requeued")
        outcomes.requeue(job, now=now, error="released", refund=True, delay=timedelta(0))
        return "requeued"
    if request.outcome == INFRA_ERROR:
        # The node's fault (quarantined, or quarantined by this post): not the job's attempt.
        refund = job.kind == JobKind.JUDGE and conduct.at_fault(node, job.pk)
        status = "failed" if outcomes.infra_error_is_final(job) and not refund else "requeued"
        outcomes.record_settlement(job, node_id=node_id, lease_epoch=request.lease_epoch, digest=digest,
                                   status=status)
        job.avoid_node_id = node_id if _another_node_serves(job, node_id, now=now) else None
        error = request.error or "infra_error"
        if refund:
            outcomes.requeue(job, now=now, error=error, message=request.message, refund=True)
        else:
            outcomes.infra_failure(job, submission, now=now, error=error, message=request.message)
        return status
    outcomes.record_settlement(job, node_id=node_id, lease_epoch=request.lease_epoch, digest=digest,
                               status="settled")
    _complete(job, node, submission, request, now=now, digest=digest)
    return "settled"


def _another_node_serves(job, node_id: int, *, now) -> bool:
    """Whether another ready node may take the job: then the node that failed it passes it
    by for a claim wait (read on the error path only, never on a claim)."""
    return ready_nodes(now=now).filter(pool=job.pool, runtime_spec=job.runtime_spec).exclude(pk=node_id).exists()


_COMPLETED_JOB_FIELDS = ("state", "finished_at", "result", "result_digest", "error", "error_message",
                         "settled_lease_epoch", "settled_node_id", "settled_digest", "settled_status",
                         "settled_node_name", "settled_runtime_spec", "settled_manifest_digest", "updated_at")
_JUDGED_SUBMISSION_FIELDS = ("verdict", "score", "time_ms", "memory_kb", "cases", "compile_output",
                             "judged_generation", "judged_at")


def _complete(job, node, submission, request: SettleRequest, *, now, digest: str) -> None:
    result = request.canonical()
    job.state = JobState.COMPLETED
    job.finished_at = now
    job.result = result
    job.result_digest = digest
    job.error = ""
    job.error_message = ""
    # Provenance from the locked node row: what it called itself when its verdict counted.
    job.settled_node_name = node.name
    job.settled_runtime_spec = node.runtime_spec or job.runtime_spec
    job.settled_manifest_digest = judged_data_digest(job.snapshot or {})
    if job.kind == JobKind.DIAGNOSTIC:
        save_locked(job, _COMPLETED_JOB_FIELDS)
        hooks.call(hooks.DIAGNOSTIC_SETTLED, job, result, now=now)
        return
    submission.verdict = request.verdict
    submission.score = request.score
    submission.time_ms = request.time_ms
    submission.memory_kb = request.memory_kb
    submission.cases = result["cases"]
    submission.compile_output = result["compileOutput"]
    submission.judged_generation = job.generation
    submission.judged_at = now
    # The job and the submission it judged, locked above, written in one statement.
    save_locked_together((job, _COMPLETED_JOB_FIELDS), (submission, _JUDGED_SUBMISSION_FIELDS))
    transaction.on_commit(lambda: metrics.settled(job, metrics.OUTCOME_JUDGED, now=now))
    if job.hidden:
        return  # graded by the server (`nodes.canaries_hidden`, `nodes.cross_checks`), counted nowhere
    outcomes.write_events(job, submission, now=now)
    hooks.call(hooks.JUDGED, job, now=now)
