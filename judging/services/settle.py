"""settle: a node posts the outcome of its lease; at most one outcome per lease takes effect."""

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from django.db import connection, transaction

from judging.identity import NodeIdentity, check_node_identity
from judging.locking import lock_job, lock_node, lock_submission, save_locked
from judging.models import JobKind, JobState, Verdict
from judging.services import outcomes
from judging.wakeups import publish_after_commit
from kece.errors import Invalid, LeaseLost, ResultConflict, Superseded

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
    if not weights and job.kind == JobKind.JUDGE:
        weights = {1: 100}  # SQL jobs are one comparison worth the whole score
    seen = set()
    for case in request.cases:
        if case.ordinal not in weights or case.ordinal in seen:
            raise Invalid(f"case {case.ordinal} is not a case of this job", fields={"cases": ["unknown ordinal"]})
        seen.add(case.ordinal)
        if case.verdict not in Verdict.values or not 0 <= case.score <= weights[case.ordinal]:
            raise Invalid(f"case {case.ordinal}: bad verdict or score", fields={"cases": ["invalid case result"]})
    if request.cases and sum(c.score for c in request.cases) != request.score:
        raise Invalid("score must be the sum of the case scores", fields={"score": ["not the sum of the cases"]})


def _job_meta(job_id: int) -> dict | None:
    """What to lock for a job (kind, submission), read without locks: it never changes."""
    if job_id >= 2**63:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT kind, submission_type, submission_id FROM judge_job WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return None if row is None else dict(zip(("kind", "submission_type", "submission_id"), row))


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
    if request.outcome not in OUTCOMES:
        raise Invalid("outcome must be JUDGED, INFRA_ERROR or RELEASED", fields={"outcome": ["unknown outcome"]})
    meta = _job_meta(request.job_id)
    if meta is None:
        raise LeaseLost("No such job for this node.")
    digest = request.digest()
    with transaction.atomic(durable=True):
        # A diagnostic result writes the node's self-check: that needs the node exclusively.
        node = lock_node(identity.node_id, shared=meta["kind"] != JobKind.DIAGNOSTIC)
        check_node_identity(node, identity)
        submission = None
        if meta["kind"] == JobKind.JUDGE:
            submission = lock_submission(meta["submission_type"], meta["submission_id"])
        job = lock_job(request.job_id)

        if job.settled_lease_epoch == request.lease_epoch and job.settled_node_id == node.pk:
            if job.settled_digest == digest:
                return "duplicate"
            raise ResultConflict()
        if job.state == JobState.CANCELLED or (
            job.kind == JobKind.JUDGE and (submission is None or submission.current_judge_job_id != job.pk)
        ):
            raise Superseded()
        if (
            job.state != JobState.RUNNING or job.node_id != node.pk or job.lease_epoch != request.lease_epoch
            or job.session_epoch != identity.session_epoch or job.lease_until is None or job.lease_until <= now
        ):
            raise LeaseLost()

        if request.outcome == JUDGED:
            _validate_judged(job, request)
        status = _apply(job, submission, request, now=now, node_id=node.pk, digest=digest)
        # A slot of this node and host group is free again: a waiting claim that was
        # refused as full may now take work.
        publish_after_commit(job.pool)
    logger.info("result accepted", extra={"job": job.pk, "lease": request.lease_epoch, "outcome": request.outcome,
                                          "status": status, "verdict": request.verdict or None})
    return status


def _apply(job, submission, request: SettleRequest, *, now, node_id: int, digest: str) -> str:
    if request.outcome == RELEASED:
        outcomes.record_settlement(job, node_id=node_id, lease_epoch=request.lease_epoch, digest=digest,
                                   status="requeued")
        outcomes.requeue(job, now=now, error="released", refund=True, delay=timedelta(0))
        return "requeued"
    if request.outcome == INFRA_ERROR:
        status = "failed" if outcomes.attempts_exhausted(job) else "requeued"
        outcomes.record_settlement(job, node_id=node_id, lease_epoch=request.lease_epoch, digest=digest,
                                   status=status)
        outcomes.infra_failure(job, submission, now=now, error=request.error or "infra_error",
                               message=request.message)
        return status
    outcomes.record_settlement(job, node_id=node_id, lease_epoch=request.lease_epoch, digest=digest,
                               status="settled")
    _complete(job, submission, request, now=now, digest=digest)
    return "settled"


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
        from nodes.checks import self_check_settled

        self_check_settled(job, result, now=now)
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
