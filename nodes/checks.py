"""Node checks: the connectivity probe, then a self-check the server grades.

1. `node_check_start` (admin) records a RUNNING check for the node's current config
   revision and schedules `node_check_run` after commit.
2. `node_check_run` probes the health endpoint (TLS, identity by HMAC proof, protocol and
   runtime version). A failure ends the check; success queues the self-check: one
   ordinary DIAGNOSTIC job per canary program of the node's pool (`nodes.canaries`), bound
   to the node, inside its own slots. Each carries the canary's manifest, source, cases or
   SQL and limits, exactly like a judge job, so a node that judges honestly passes.
   The first also asks (`ownChecks`) for the node's own items — sandbox isolation, bounded
   filesystems, MySQL protections — which the node may attach to its result as `checks`.
3. Each result settles through the ordinary settle path, which calls `self_check_settled`
   (registered in `judging.hooks`; an attempt that ends without a judgement calls
   `self_check_failed`: a diagnostic job's INFRA_ERROR is final). When the last job of the check has ended, the server
   compares every verdict with the canary's expected one and writes one item per program
   (`tle.cpp: expected TLE, got TLE in 1012 ms`) plus the node's own items. It passes only
   when every canary got its verdict and no own item failed (a weak sandbox only where
   `KECE_ALLOW_WEAK_SANDBOX` accepts it). Only the check record and the node's self-check
   verdict are written — no submission, no statistics. A pass also ends a quarantine
   (`nodes.quarantine`).
4. `checks_expire` fails a check whose node never finished it and cancels its jobs; the
   canaries that ended are graded, the others say they got no result.

An agent that does not know canaries runs its own check for every DIAGNOSTIC job and
answers AC to each: the canaries that expect another verdict fail its self-check.
"""

import hashlib
import hmac
import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from kece.errors import Busy, NotFound
from nodes.models import CheckStatus, JudgeNode, NodeCheck
from nodes.quarantine import quarantine_clear_locked

logger = logging.getLogger("kece.checks")

PROTOCOL_VERSION = 1


def node_check_start(*, node_id: int, actor, now) -> NodeCheck:
    from judging.locking import lock_node
    from kece.background import run_after_commit
    from nodes.services import audit

    with transaction.atomic(durable=True):
        node = lock_node(node_id)
        if node is None:
            raise NotFound()
        if NodeCheck.objects.filter(node=node, status=NodeCheck.Status.RUNNING).exists():
            raise Busy()
        # The node keeps its last verdict while the check runs: a re-check of a working node
        # does not take it out of service.
        check = NodeCheck.objects.create(node=node, config_revision=node.config_revision,
                                         runtime_spec=node.runtime_spec, agent_version=node.agent_version,
                                         created_by=actor if getattr(actor, "pk", None) else None, started_at=now)
        audit(node=node, actor=actor, action="check", before={}, after={"checkId": check.pk},
              revision=node.revision)
        run_after_commit("nodes.run_check", check.pk)
    logger.info("node check started", extra={"node": node_id, "check": check.pk})
    return check


def _item(name: str, ok: bool, detail: str) -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail[:2000]}


def connectivity_items(node, answer: dict, challenge: str) -> list[dict]:
    expected = hmac.new(node.probe_key.encode(), challenge.encode(), hashlib.sha256).hexdigest().encode()
    proof = str(answer.get("proof", "")).encode("utf-8", errors="replace")
    return [
        _item("tls", True, f"HTTPS to {node.base_url} with a verified certificate"),
        _item("identity", answer.get("nodeId") == node.pk and hmac.compare_digest(proof, expected),
              "the node proved its probe key" if hmac.compare_digest(proof, expected)
              else "wrong node id or HMAC proof"),
        _item("pool", answer.get("pool") == node.pool, f"pool {answer.get('pool')!r}, expected {node.pool!r}"),
        _item("protocol", answer.get("protocolVersion") == PROTOCOL_VERSION,
              f"protocol {answer.get('protocolVersion')!r}, expected {PROTOCOL_VERSION}"),
        _item("runtime", bool(answer.get("runtimeSpec")) and answer.get("runtimeSpec") == node.runtime_spec,
              f"runtime {answer.get('runtimeSpec')!r}, session reported {node.runtime_spec!r}"),
    ]


def node_check_run(check_id: int, *, now=None) -> None:
    """The connectivity probe, then (if it passed) the diagnostic job. Runs in the
    background: never inside a request's transaction, never holding a lock while probing."""
    from django.utils import timezone

    from nodes.probe import ProbeFailed, probe_health

    check = NodeCheck.objects.select_related("node").filter(pk=check_id).first()
    if check is None or check.status != NodeCheck.Status.RUNNING:
        return
    node = check.node
    challenge = secrets.token_hex(16)
    try:
        answer = probe_health(node, challenge=challenge)
        items = connectivity_items(node, answer, challenge)
    except ProbeFailed as exc:
        items = [_item("connectivity", False, str(exc))]
    passed = all(i["ok"] for i in items)
    now = now or timezone.now()
    if not passed:
        _finish_check_locked(check, passed=False, items=items, now=now)
        logger.warning("node check failed: connectivity", extra={"node": node.pk, "check": check.pk})
        return
    _queue_self_check(check, node, items=items, now=now)


def _canary_snapshot(check, canary, *, pool: str, own_checks: bool) -> dict:
    from judging.services.snapshot import job_snapshot

    snapshot = job_snapshot(problem=canary.problem, manifest=canary.manifest, pool=pool, language=pool,
                            source=canary.source)
    return {**snapshot, "checkId": check.pk, "canary": {"name": canary.name, "expect": canary.expect},
            "ownChecks": own_checks}


def _queue_self_check(check, node, *, items, now) -> None:
    from judging.locking import lock_node
    from judging.models import JobKind, JudgeJob, PriorityClass
    from judging.priority import claim_key
    from judging.services.problems import PackageError
    from judging.wakeups import publish_after_commit
    from nodes.canaries import canaries_for

    try:
        canaries = canaries_for(node.pool)
    except (PackageError, OSError) as exc:
        logger.error("canaries unusable", extra={"node": node.pk, "check": check.pk, "pool": node.pool})
        _finish_check_locked(check, passed=False, now=now, items=items + [_item("canaries", False, str(exc))])
        return
    if not canaries:
        _finish_check_locked(check, passed=False, now=now,
                             items=items + [_item("canaries", False, f"no canary ships for pool {node.pool}")])
        return
    with transaction.atomic(durable=True):
        # Under the node lock, which expiry takes too: a check that ran out of time while
        # the probe was slow gets no orphan job.
        lock_node(node.pk)
        if not NodeCheck.objects.filter(pk=check.pk, status=NodeCheck.Status.RUNNING, job_id__isnull=True).exists():
            return
        # (submission_type, submission_id, generation) is unique: the check's jobs are
        # told apart by generation, the canary's place in the list.
        jobs = [JudgeJob.objects.create(
            kind=JobKind.DIAGNOSTIC, submission_type="DIAGNOSTIC", submission_id=check.pk, generation=number,
            pool=node.pool, runtime_spec=node.runtime_spec or f"{node.pool}-r1", bound_node_id=node.pk,
            manifest=canary.manifest, snapshot=_canary_snapshot(check, canary, pool=node.pool, own_checks=number == 1),
            available_at=now, created_at=now, priority_class=PriorityClass.EXAM,
            claim_key=claim_key(PriorityClass.EXAM, now),
        ) for number, canary in enumerate(canaries, start=1)]
        NodeCheck.objects.filter(pk=check.pk).update(items=items, job_id=jobs[0].pk)
        publish_after_commit(node.pool)
    logger.info("self-check queued", extra={"node": node.pk, "check": check.pk, "jobs": len(jobs)})


def _finish_check(check, *, node_id: int, passed: bool, items: list[dict], now) -> None:
    """Write the check's verdict and the node's. The caller holds the node's lock."""
    status = NodeCheck.Status.PASSED if passed else NodeCheck.Status.FAILED
    updated = NodeCheck.objects.filter(pk=check.pk, status=NodeCheck.Status.RUNNING).update(
        items=list(check.items) + items, status=status, finished_at=now)
    if updated:
        JudgeNode.objects.filter(pk=node_id).update(
            self_check_status=CheckStatus.PASSED if passed else CheckStatus.FAILED,
            self_check_revision=check.config_revision, self_check_runtime_spec=check.runtime_spec,
            self_check_agent_version=check.agent_version, self_check_finished_at=now,
            updated_at=now,  # whether it may judge changed: the stall rule starts again from here
        )
        # A check answers for the quarantine it was started against: one that began while it
        # ran (a canary it failed meanwhile) needs a check of its own.
        quarantined = JudgeNode.objects.filter(pk=node_id, quarantined_at__isnull=False,
                                               quarantined_at__lte=check.started_at).first() if passed else None
        if quarantined is not None:
            quarantine_clear_locked(quarantined, now=now, check_id=check.pk)


def _finish_check_locked(check, *, passed: bool, items: list[dict], now) -> None:
    from judging.locking import lock_node

    with transaction.atomic(durable=True):
        lock_node(check.node_id)
        _finish_check(check, node_id=check.node_id, passed=passed, items=items, now=now)


def _check_of(job):
    check_id = (job.snapshot or {}).get("checkId")
    return NodeCheck.objects.filter(pk=check_id).first() if check_id else None


def _jobs_of(check) -> list:
    from judging.models import JobKind, JudgeJob

    return list(JudgeJob.objects.filter(kind=JobKind.DIAGNOSTIC, submission_type="DIAGNOSTIC",
                                        submission_id=check.pk).order_by("generation"))


# The self-check item by which an agent says its sandbox isolates user code.
ISOLATION_ITEM = "sandbox_isolated"


def _canary_item(job) -> dict:
    from judging.models import JobState

    canary = job.snapshot.get("canary") or {}
    name, expect = str(canary.get("name") or f"job {job.pk}"), canary.get("expect")
    if job.state == JobState.COMPLETED:
        got, ms = (job.result or {}).get("verdict"), (job.result or {}).get("timeMs", 0)
        return _item(name, expect is not None and got == expect, f"expected {expect}, got {got} in {ms} ms")
    if job.state == JobState.FAILED:
        why = f"{job.error}: {job.error_message}".strip(": ")
        return _item(name, False, f"expected {expect}, got no judgement (INFRA_ERROR {why})")
    return _item(name, False, f"expected {expect}, got no result")


def _own_items(jobs) -> list[dict]:
    """The node's own items, from the job that asked for them: an agent that attaches its
    list to every result is heard once. Reported as they are, except that a weak sandbox
    is marked accepted where the server is configured to accept one."""
    from judging.models import JobState

    asked = next((j for j in jobs if j.snapshot.get("ownChecks")), None)
    if asked is None or asked.state != JobState.COMPLETED:
        return []
    items = [_item(str(c.get("name", ""))[:100], bool(c.get("ok")), str(c.get("detail", "")))
             for c in (asked.result or {}).get("checks") or []]
    if not items:
        return [_item("own_checks", True, "the node reported no items of its own (they are optional)")]
    for i in items:
        if i["name"] == ISOLATION_ITEM and not i["ok"] and settings.KECE_ALLOW_WEAK_SANDBOX:
            i["detail"] = f"accepted (KECE_ALLOW_WEAK_SANDBOX is on): {i['detail']}"[:2000]
    return items


def self_check_grade(jobs) -> tuple[bool, list[dict]]:
    """Every canary against its expected verdict, then the node's own items."""
    canaries = [_canary_item(job) for job in jobs if job.snapshot.get("canary")]
    if not canaries:
        canaries = [_item("canaries", False, "no canary program was judged")]
    own = _own_items(jobs)
    excused = ISOLATION_ITEM if settings.KECE_ALLOW_WEAK_SANDBOX else None
    passed = all(i["ok"] for i in canaries) and all(i["ok"] or i["name"] == excused for i in own)
    return passed, canaries + own


def _job_ended(job, *, now) -> None:
    """One of the check's jobs reached a terminal state (the caller holds the node's lock,
    which every path ending a diagnostic job takes: they are serialised). The check is
    graded once the last of them has ended."""
    from judging.models import JobState

    check = _check_of(job)
    if check is None or check.status != NodeCheck.Status.RUNNING:
        return
    jobs = [job if j.pk == job.pk else j for j in _jobs_of(check)]
    if any(j.state in JobState.ACTIVE for j in jobs):
        return
    passed, items = self_check_grade(jobs)
    _finish_check(check, node_id=check.node_id, passed=passed, items=items, now=now)
    logger.info("self-check finished", extra={"node": check.node_id, "check": check.pk, "passed": passed,
                                              "failed": ",".join(i["name"] for i in items if not i["ok"]) or None})


def self_check_settled(job, result: dict, *, now) -> None:
    """Called by settle, inside its transaction (the node is locked exclusively)."""
    _job_ended(job, now=now)


def self_check_failed(job, *, now, error: str, message: str) -> None:
    """The job ended without a judgement (`job.error` says why): its canary fails."""
    _job_ended(job, now=now)


def checks_expire(*, now) -> int:
    """Fail checks the node never finished, and cancel their diagnostic job whether it is
    still queued or running (a renewal then tells the node to stop)."""
    from judging.locking import lock_jobs, lock_node
    from judging.models import JobState
    from judging.services.outcomes import cancel

    deadline = now - timedelta(milliseconds=settings.KECE_SELF_CHECK_TIMEOUT_MS)
    expired = 0
    for check in NodeCheck.objects.filter(status=NodeCheck.Status.RUNNING, started_at__lt=deadline):
        with transaction.atomic(durable=True):
            lock_node(check.node_id)
            check.refresh_from_db()
            if check.status != NodeCheck.Status.RUNNING:
                continue
            for job in lock_jobs([j.pk for j in _jobs_of(check) if j.state in JobState.ACTIVE]).values():
                if job.state in JobState.ACTIVE:
                    cancel(job, now=now, reason="check_expired")
            _, items = self_check_grade(_jobs_of(check))
            _finish_check(check, node_id=check.node_id, passed=False, now=now, items=items + [
                _item("self-check", False, "The node did not finish its self-check in time.")])
        expired += 1
    return expired
