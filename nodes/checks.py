"""Self-check records: what a diagnostic job found, tied to the config it ran against."""

from nodes.models import CheckStatus, NodeCheck


def self_check_passed_for_current_config(node) -> bool:
    return (
        node.self_check_status == CheckStatus.PASSED
        and node.self_check_revision == node.config_revision
        and node.self_check_runtime_spec == node.runtime_spec
    )


def _finish(job, *, now, passed: bool, items: list[dict]) -> None:
    """Write the check record and the node's self-check verdict. Runs inside the settle or
    failure transaction, which already holds the node's lock."""
    from nodes.models import JudgeNode

    check_id = (job.snapshot or {}).get("checkId")
    check = NodeCheck.objects.filter(pk=check_id).first() if check_id else None
    if check is None:
        return
    status = NodeCheck.Status.PASSED if passed else NodeCheck.Status.FAILED
    NodeCheck.objects.filter(pk=check.pk).update(items=list(check.items) + items, status=status, finished_at=now)
    JudgeNode.objects.filter(pk=check.node_id).update(
        self_check_status=CheckStatus.PASSED if passed else CheckStatus.FAILED,
        self_check_revision=check.config_revision,
        self_check_runtime_spec=check.runtime_spec,
        self_check_finished_at=now,
    )


def self_check_settled(job, result: dict, *, now) -> None:
    items = [
        {"name": str(c.get("name", ""))[:100], "ok": bool(c.get("ok")), "detail": str(c.get("detail", ""))[:2000]}
        for c in result.get("checks") or []
    ]
    passed = result.get("verdict") == "AC" and bool(items) and all(i["ok"] for i in items)
    if not items:
        items = [{"name": "self-check", "ok": False, "detail": "The node reported no self-check items."}]
    _finish(job, now=now, passed=passed, items=items)


def self_check_failed(job, *, now, error: str, message: str) -> None:
    _finish(job, now=now, passed=False,
            items=[{"name": "self-check", "ok": False, "detail": f"{error}: {message}".strip(": ")[:2000]}])
