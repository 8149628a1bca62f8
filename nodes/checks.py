"""Node checks: the connectivity probe, then a self-check the node runs as a diagnostic job.

1. `node_check_start` (admin) records a RUNNING check for the node's current config
   revision and schedules `node_check_run` after commit.
2. `node_check_run` probes the health endpoint (TLS, identity by HMAC proof, protocol and
   runtime version). A failure ends the check; success queues a DIAGNOSTIC job bound to
   the node, inside its own slots.
3. The node's result settles through the ordinary settle path, which calls
   `self_check_settled` (registered in `judging.hooks`): the check record and the node's
   self-check verdict are written — nothing else (no submission, no statistics). A pass
   also ends a quarantine (`nodes.quarantine`).
4. `checks_expire` fails a check whose node never finished it and cancels its job.
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
DIAGNOSTIC_LIMITS = {"timeLimitMs": 5000, "memoryLimitMb": 256, "outputLimitKb": 1024}


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


def _queue_self_check(check, node, *, items, now) -> None:
    from judging.locking import lock_node
    from judging.models import JobKind, JudgeJob
    from judging.wakeups import publish_after_commit

    with transaction.atomic(durable=True):
        # Under the node lock, which expiry takes too: a check that ran out of time while
        # the probe was slow gets no orphan job.
        lock_node(node.pk)
        if not NodeCheck.objects.filter(pk=check.pk, status=NodeCheck.Status.RUNNING, job_id__isnull=True).exists():
            return
        job = JudgeJob.objects.create(
            kind=JobKind.DIAGNOSTIC, submission_type="DIAGNOSTIC", submission_id=check.pk, generation=1,
            pool=node.pool, runtime_spec=node.runtime_spec or f"{node.pool}-r1", bound_node_id=node.pk,
            snapshot={"checkId": check.pk, "limits": DIAGNOSTIC_LIMITS}, available_at=now, created_at=now,
        )
        NodeCheck.objects.filter(pk=check.pk).update(items=items, job_id=job.pk)
        publish_after_commit(node.pool)
    logger.info("self-check queued", extra={"node": node.pk, "check": check.pk, "job": job.pk})


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
        )
        quarantined = JudgeNode.objects.filter(pk=node_id, quarantined_at__isnull=False).first() if passed else None
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


# The self-check item by which an agent says its sandbox isolates user code.
ISOLATION_ITEM = "sandbox_isolated"


def self_check_settled(job, result: dict, *, now) -> None:
    """Called by settle, inside its transaction (the node is locked exclusively).

    A node whose agent runs user code in the weak sandbox fails, unless the server is
    configured to accept such nodes (``KECE_ALLOW_WEAK_SANDBOX``); its item stays failed, so
    the console shows what was accepted."""
    check = _check_of(job)
    if check is None:
        return
    items = [
        _item(str(c.get("name", ""))[:100], bool(c.get("ok")), str(c.get("detail", "")))
        for c in result.get("checks") or []
    ]
    failed = {i["name"] for i in items if not i["ok"]}
    weak_accepted = failed == {ISOLATION_ITEM} and settings.KECE_ALLOW_WEAK_SANDBOX
    passed = bool(items) and ((result.get("verdict") == "AC" and not failed) or weak_accepted)
    if weak_accepted:
        for i in items:
            if i["name"] == ISOLATION_ITEM:
                i["detail"] = f"accepted (KECE_ALLOW_WEAK_SANDBOX is on): {i['detail']}"[:2000]
    if not items:
        items = [_item("self-check", False, "The node reported no self-check items.")]
    _finish_check(check, node_id=check.node_id, passed=passed, items=items, now=now)
    logger.info("self-check finished", extra={"node": check.node_id, "check": check.pk, "passed": passed})


def self_check_failed(job, *, now, error: str, message: str) -> None:
    check = _check_of(job)
    if check is not None:
        _finish_check(check, node_id=check.node_id, passed=False,
                      items=[_item("self-check", False, f"{error}: {message}".strip(": "))], now=now)


def checks_expire(*, now) -> int:
    """Fail checks the node never finished, and cancel their diagnostic job whether it is
    still queued or running (a renewal then tells the node to stop)."""
    from judging.locking import lock_job, lock_node
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
            job = lock_job(check.job_id) if check.job_id else None
            if job is not None and job.state in JobState.ACTIVE:
                cancel(job, now=now, reason="check_expired")
            _finish_check(check, node_id=check.node_id, passed=False, now=now,
                          items=[_item("self-check", False, "The node did not finish its self-check in time.")])
        expired += 1
    return expired
