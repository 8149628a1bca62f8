"""settle: a node posts the outcome of its lease; at most one outcome per lease takes effect."""

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from django.db import transaction

from judging import hooks
from judging.identity import NodeIdentity, check_node_identity
from judging.locking import lock_jobs, lock_node, lock_submission, save_locked
from judging.models import JobKind, JobState, Verdict
from judging.selectors import ready_nodes
from judging.services import conduct, job_meta, outcomes
from judging.services.claim import ClaimResult, job_claim
from judging.services.leases import was_leased_to
from judging.wakeups import publish_after_commit
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
                "cases": [asdict(c) for c in sorted(self.cases, key=lambda c: c.ordinal)],
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
    if request.verdict not in Verdict.values:
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
        if case.verdict not in Verdict.values or not 0 <= case.score <= weights[case.ordinal]:
            raise Invalid(f"case {case.ordinal}: bad verdict or score", fields={"cases": ["invalid case result"]})
    if request.cases and sum(c.score for c in request.cases) != request.score:
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
    status, settled = _settle(identity, request, now=now)
    if status != "duplicate":
        # A slot of this node and host group is free again: a waiting claim that was
        # refused as full may now take work.
        publish_after_commit(settled.pool)
    return status


def job_settle_and_claim(*, identity: NodeIdentity, request: SettleRequest, now,
                         free_slots: int) -> tuple[str, ClaimResult]:
    """`job_settle`, then, once the result is committed, lease up to `free_slots` jobs to the
    node: the claim a result post may carry (`job_claim`, in a transaction of its own).

    Two transactions, not one: a claim holds its host group's row lock, on which every
    claim of the group queues, and a settle folded into it would hold that lock through
    its own writes too — under load, twice as long for every slot of the group.

    A refused result leases nothing. Neither does a RELEASED one (the node is giving work
    back) nor a diagnostic one (its verdict may have just changed whether the node may
    judge): their claim is empty, and the node's long-poll claim takes the slot. The
    settled job itself is never handed back. A `duplicate` (the same post again: its answer
    was lost) first gets back the jobs that answer held, if the node has not renewed them,
    and leases only for the slots asked beyond them. A claim refused after the result
    was accepted (the node revoked meanwhile) is empty: the result stands."""
    status, settled = _settle(identity, request, now=now)
    claim = ClaimResult(desired_state=settled.desired_state, reason="not_after_this_result")
    if free_slots and settled.kind == JobKind.JUDGE and request.outcome != RELEASED:
        try:
            claim = job_claim(identity=identity, free_slots=free_slots, now=now, carried_by=request.job_id,
                              resend=status == "duplicate")
        except DomainError as error:
            logger.info("claim after result refused", extra={"node": identity.node_id, "error": error.code})
            claim = ClaimResult(desired_state=settled.desired_state, reason=error.code)
    if status != "duplicate" and not claim.jobs:
        # The slot stays free: a waiting claim that was refused as full may now take work.
        publish_after_commit(settled.pool)
    return status, claim


@dataclass(frozen=True)
class _Settled:
    kind: str
    pool: str
    desired_state: str


class _StaleMeta(Exception):
    """The cached job meta did not match the locked row: read it again."""


def _settle(identity: NodeIdentity, request: SettleRequest, *, now) -> tuple[str, _Settled]:
    if request.outcome not in OUTCOMES:
        raise Invalid("outcome must be JUDGED, INFRA_ERROR or RELEASED", fields={"outcome": ["unknown outcome"]})
    digest = request.digest()
    try:
        return _settle_once(identity, request, now=now, digest=digest, fresh=False)
    except _StaleMeta:
        job_meta.forget(request.job_id)
        return _settle_once(identity, request, now=now, digest=digest, fresh=True)


def _settle_once(identity: NodeIdentity, request: SettleRequest, *, now, digest: str,
                 fresh: bool) -> tuple[str, _Settled]:
    meta = job_meta.job_meta(request.job_id, fresh=fresh)
    if meta is None:
        raise LeaseLost("No such job for this node.")
    with transaction.atomic(durable=True):
        # A diagnostic result writes the node's self-check, an INFRA_ERROR the node's run of
        # errors (`conduct`): both need the node exclusively.
        infra = request.outcome == INFRA_ERROR and meta.kind == JobKind.JUDGE
        node = lock_node(identity.node_id, shared=meta.kind != JobKind.DIAGNOSTIC and not infra)
        check_node_identity(node, identity)
        submission = None
        if meta.kind == JobKind.JUDGE:
            submission = lock_submission(meta.submission_type, meta.submission_id)
        # An error that quarantines the node refunds the other jobs of its run: locked with
        # this one, in one ascending acquisition.
        others = lock_jobs([request.job_id, *conduct.refund_candidates(node, request.job_id)]) if infra \
            else lock_jobs([request.job_id])
        job = others.pop(request.job_id, None)
        if job is None:
            raise LeaseLost("No such job for this node.")
        if job_meta.meta_of(job) != meta:
            raise _StaleMeta()

        status = _check_and_apply(job, node, submission, identity, request, now=now, digest=digest)
        if infra and status in ("requeued", "failed"):
            conduct.infra_error_recorded(node, job, others, now=now)
    if status == "settled" and meta.kind == JobKind.JUDGE and node.infra_error_jobs:
        conduct.judgement_recorded(node.pk)
    logger.info("result accepted", extra={"job": job.pk, "lease": request.lease_epoch, "outcome": request.outcome,
                                          "status": status, "verdict": request.verdict or None})
    return status, _Settled(kind=meta.kind, pool=job.pool, desired_state=node.desired_state)


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
        or job.session_epoch != identity.session_epoch or job.lease_until is None or job.lease_until <= now
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
    _complete(job, submission, request, now=now, digest=digest)
    return "settled"


def _another_node_serves(job, node_id: int, *, now) -> bool:
    """Whether another ready node may take the job: then the node that failed it passes it
    by for a claim wait (read on the error path only, never on a claim)."""
    return ready_nodes(now=now).filter(pool=job.pool, runtime_spec=job.runtime_spec).exclude(pk=node_id).exists()


def _complete(job, submission, request: SettleRequest, *, now, digest: str) -> None:
    result = request.canonical()
    job.state = JobState.COMPLETED
    job.finished_at = now
    job.result = result
    job.result_digest = digest
    job.error = ""
    job.error_message = ""
    save_locked(job, [
        "state", "finished_at", "result", "result_digest", "error", "error_message",
        "settled_lease_epoch", "settled_node_id", "settled_digest", "settled_status", "updated_at",
    ])
    if job.kind == JobKind.DIAGNOSTIC:
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
    save_locked(submission, ["verdict", "score", "time_ms", "memory_kb", "cases", "compile_output",
                                   "judged_generation", "judged_at"])
    outcomes.write_events(job, submission, now=now)
