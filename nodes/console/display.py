"""What the console shows, in words: states, ages, self-check verdicts, the strip's rows and
the impact of an action — computed from the same figures as the admin API
(`nodes.selectors.pool_figures`)."""

from django.utils.translation import gettext as _, gettext_lazy, ngettext, pgettext

from judging.console.display import add_slots_words, figure, sentences, window_words
from judging.display import listed
from nodes.models import self_check_passed_for_current_config
from nodes.models import CheckStatus, DesiredState, JudgeNode, ObservedState
from pools.registry import POOLS

# observed state → (words, icon): never colour alone.
OBSERVED_WORDS = {
    ObservedState.READY: (gettext_lazy("Ready"), "ok"),
    ObservedState.BUSY: (gettext_lazy("Busy"), "run"),
    ObservedState.OFFLINE: (gettext_lazy("Offline"), "down"),
    ObservedState.UNHEALTHY: (gettext_lazy("Unhealthy"), "down"),
    ObservedState.DRAINING: (gettext_lazy("Draining"), "queue"),
    ObservedState.DISABLED: (gettext_lazy("Disabled"), "unknown"),
    ObservedState.UNVERIFIED: (gettext_lazy("Not verified"), "queue"),
}
CONFIG_WORDS = {
    DesiredState.PENDING_VERIFICATION: gettext_lazy("Pending verification"),
    DesiredState.ENABLED: gettext_lazy("Enabled"),
    DesiredState.DRAINING: gettext_lazy("Draining"),
    DesiredState.DISABLED: gettext_lazy("Disabled"),
}

# An audit entry's action, a node's changed setting, a job's error, in the timeline's words.
AUDIT_WORDS = {
    "register": gettext_lazy("registered"),
    "update": gettext_lazy("changed"),
    "revoke": gettext_lazy("revoked"),
    "check": gettext_lazy("self-check started"),
    "join_code": gettext_lazy("join code issued"),
    "rotate": gettext_lazy("join code replaced"),
    "quarantine": gettext_lazy("quarantined"),
    "quarantine_cleared": gettext_lazy("quarantine lifted by a passing self-check"),
}
SETTING_WORDS = {
    "name": gettext_lazy("Name"),
    "pool": gettext_lazy("Pool"),
    "base_url": gettext_lazy("Base URL"),
    "host_group_id": gettext_lazy("Host group"),
    "max_slots": gettext_lazy("Max slots"),
    "desired_state": gettext_lazy("Config state"),
    "config_revision": gettext_lazy("Configuration revision"),
}
JOB_ERROR_WORDS = {
    "lease_expired": gettext_lazy("lease expired"),
    "session_replaced": gettext_lazy("session replaced"),
    "released": gettext_lazy("given back by the node"),
    "node_revoked": gettext_lazy("the node was revoked"),
    "node_not_judging": gettext_lazy("withdrawn: the node was not judging"),
    "check_expired": gettext_lazy("the check expired"),
    "deleted": gettext_lazy("its submission was deleted"),
    "superseded": gettext_lazy("replaced by a newer job"),
}


def audit_words(action: str) -> str:
    return AUDIT_WORDS.get(action, action)


def setting_changes(before: dict, after: dict, *, group_names: dict) -> list[tuple]:
    """(setting, before, after) in words for the node settings an audit entry changed; the
    entry's other keys (a reason, a check's id) are not settings."""
    def value(key, raw):
        if key == "desired_state":
            return CONFIG_WORDS.get(raw, raw)
        if key == "host_group_id":
            return group_names.get(raw, raw)
        return raw

    if not before:
        return []
    return [(SETTING_WORDS[key], value(key, before.get(key)), value(key, after.get(key)))
            for key in SETTING_WORDS if key in before and before.get(key) != after.get(key)]


# The connectivity check's items (`nodes.checks.connectivity_items`) in words; their
# details, and a node's own items, are the server's and the agent's English, kept as they are.
CHECK_ITEM_WORDS = {
    "connectivity": gettext_lazy("reaching its health endpoint"), "tls": gettext_lazy("its TLS certificate"),
    "identity": gettext_lazy("its identity (the probe key)"), "pool": gettext_lazy("its pool"),
    "protocol": gettext_lazy("its protocol version"), "runtime": gettext_lazy("its runtime spec"),
}


# The quarantine rules (`nodes.quarantine`; a reason starts with its rule's name, then the
# server's English account of what the node did).
QUARANTINE_RULE_WORDS = {
    "infra_errors": gettext_lazy("infrastructure errors on several jobs in a row"),
    "stalled": gettext_lazy("free slots and work waiting, but no claim"),
    "renew_lost": gettext_lazy("its lease renewals kept failing"),
    "canary_mismatch": gettext_lazy("a hidden canary judged wrongly"),
    "cross_check": gettext_lazy("verdicts that disagreed with its peers'"),
}


def quarantine_reason_words(reason: str) -> str:
    """A quarantine's reason: its rule in the page's language, then what the server recorded
    (in English)."""
    rule, _sep, account = reason.partition(": ")
    if rule not in QUARANTINE_RULE_WORDS:
        return reason
    return str(QUARANTINE_RULE_WORDS[rule]) + pgettext("label separator", ": ") + account


def quarantine_words(reason: str) -> str:
    return _("Quarantined by the server: %(reason)s") % {"reason": quarantine_reason_words(reason)}


def check_item_words(name: str) -> str:
    return CHECK_ITEM_WORDS.get(name, name)


# What a running job is doing, as its node last reported it (`progress_phase`).
PHASE_WORDS = {"COMPILING": gettext_lazy("Compiling"), "JUDGING": gettext_lazy("Judging")}


def phase_words(phase: str) -> str:
    return PHASE_WORDS.get(phase, phase) if phase else "—"


def job_error_words(error: str) -> str:
    """A job's error as the timeline says it: the server's own codes in words, an agent's
    infrastructure error by its code."""
    words = JOB_ERROR_WORDS.get(error)
    return words if words is not None else _("infrastructure error: %(code)s") % {"code": error}


def ago(moment, *, now) -> str:
    if moment is None:
        return _("never")
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:
        return _("%(n)d s ago") % {"n": seconds}
    if seconds < 7200:
        return _("%(n)d min ago") % {"n": seconds // 60}
    return _("%(n)d h ago") % {"n": seconds // 3600}


def duration(seconds: int) -> str:
    if seconds < 120:
        return _("%(n)d s") % {"n": seconds}
    if seconds < 7200:
        return _("%(n)d min") % {"n": seconds // 60}
    return _("%(n)d h") % {"n": seconds // 3600}


def self_check_words(node, *, running: bool) -> tuple[str, str]:
    """(words, icon) of the node's self-check as it speaks for the node now."""
    if running:
        return _("running"), "run"
    if node.self_check_status == CheckStatus.PASSED:
        if self_check_passed_for_current_config(node):
            return _("passed for revision %(n)d") % {"n": node.self_check_revision}, "ok"
        return _("out of date"), "unknown"
    if node.self_check_status == CheckStatus.FAILED:
        return _("failed"), "down"
    return _("none"), "unknown"


def reason(node, observed: str) -> str:
    """Why a node is not taking work: revoked, the server's quarantine reason (what the node
    did), else what its heartbeat and self-check say."""
    if node.revoked_at is not None:
        return _("Revoked: its credential no longer works. Rotate its credential to let it join again.")
    if node.quarantined_at is not None:
        return quarantine_words(node.quarantine_reason)
    if observed == ObservedState.OFFLINE:
        return _("No session or no fresh heartbeat.") if node.session_open else _("The agent closed its session.")
    if observed == ObservedState.UNHEALTHY:
        if not node.health_ok:
            failing = sorted(name for name, ok in (node.health_checks or {}).items() if not ok)
            return (_("Its own health check fails: %(checks)s.") % {"checks": listed(failing)} if failing
                    else _("Its own health check fails."))
        return _("No passing self-check for what it runs now.")
    return ""


def node_row(node, *, now, running_check: bool, host_group_name: str) -> dict:
    from nodes.selectors import observed_state

    observed = observed_state(node, now=now)
    words, icon = OBSERVED_WORDS[observed]
    check_words, check_icon = self_check_words(node, running=running_check)
    return {
        "node": node, "observed": observed, "observed_words": words, "observed_icon": icon,
        "config_words": _("Revoked") if node.revoked_at is not None else
        CONFIG_WORDS.get(node.desired_state, node.desired_state), "running": node.running,
        "heartbeat_ago": ago(node.last_heartbeat_at, now=now), "check_words": check_words, "check_icon": check_icon,
        "reason": reason(node, observed), "pool_label": POOLS[node.pool].label, "host_group": host_group_name,
    }


def capacity_words(advice, *, window_s: int) -> tuple[str, str]:
    """(words, icon) of a pool's capacity advice (`judging.capacity.pool_advice`), with the
    figures it came from and the headroom rule it applies."""
    from judging.capacity import ENOUGH, QUIET, UNMEASURED

    window = window_words(window_s)
    if advice.verdict == QUIET:
        return _("Nothing arrived in the last %(window)s: no load to size.") % {"window": window}, "unknown"
    rate = figure(advice.arrival_rate)
    if advice.verdict == UNMEASURED:
        return _("%(rate)s jobs/s arrived in the last %(window)s, but none is judged yet: no judge time to size "
                 "by.") % {"rate": rate, "window": window}, "unknown"
    rho = round(advice.max_utilisation * 100)
    needs = _("Needs about %(busy)s busy slots on average (%(rate)s jobs/s × %(seconds)s s, last %(window)s).") % {
        "busy": figure(advice.busy_slots), "rate": rate, "seconds": figure(advice.judge_seconds), "window": window}
    ready = advice.ready_slots
    if advice.verdict == ENOUGH:
        verdict = ngettext("%(n)d ready slot: enough to keep at most %(rho)d%% busy.",
                           "%(n)d ready slots: enough to keep at most %(rho)d%% busy.", ready) % {"n": ready, "rho": rho}
        return sentences(needs, verdict), "ok"
    verdict = ngettext("%(n)d ready slot: not enough to keep at most %(rho)d%% busy.",
                       "%(n)d ready slots: not enough to keep at most %(rho)d%% busy.", ready) % {"n": ready, "rho": rho}
    return sentences(needs, verdict, add_slots_words(advice.add_slots)), "down"


def strip_rows(figures: list[dict], counts: dict[str, dict], advice: dict | None = None, *,
               window_s: int = 0) -> list[dict]:
    advice = advice or {}
    rows = []
    for row in figures:
        extra = counts.get(row["pool"], {"nodes": 0, "unwell": 0, "capacity": 0})
        label = POOLS[row["pool"]].label
        alarm = ""
        if row["pending"] and not row["readyNodes"] and row.get("throttling"):
            alarm = ngettext("%(pool)s: %(n)d waiting, no judge can take it; practice submits are refused until "
                             "one is back",
                             "%(pool)s: %(n)d waiting, no judge can take them; practice submits are refused until "
                             "one is back", row["pending"]) % {"pool": label, "n": row["pending"]}
        elif row["pending"] and not row["readyNodes"]:
            alarm = ngettext("%(pool)s: %(n)d waiting, no judge can take it",
                             "%(pool)s: %(n)d waiting, no judge can take them", row["pending"]) % {
                "pool": label, "n": row["pending"]}
        elif row.get("throttling"):
            alarm = _("%(pool)s is throttling: practice submits are refused and bulk rejudges paused") % {
                "pool": label}
        words, icon = capacity_words(advice[row["pool"]], window_s=window_s) if row["pool"] in advice else ("", "")
        rows.append({**row, **extra, "label": label, "alarm": alarm, "advice": words, "advice_icon": icon,
                     "short": icon == "down",
                     "oldest_wait": duration(row["oldestWaitSeconds"]) if row["pending"] else "—"})
    return rows


def _ready_clause(pool_label: str, ready_after: int) -> str:
    if ready_after == 0:
        return _("leaves %(pool)s with no ready node") % {"pool": pool_label}
    return ngettext("leaves %(pool)s with %(n)d ready node", "leaves %(pool)s with %(n)d ready nodes",
                    ready_after) % {"pool": pool_label, "n": ready_after}


def impact(action: str, *, node, figures: dict, counts_ready: bool, last_attempts: int = 0) -> str:
    """What the action does to the pool, in one sentence: "Draining python-2 leaves python
    with 1 ready node; its 3 running jobs will finish". `last_attempts`: of its running jobs,
    those on their last allowed attempt, which a revoke ends as a system error."""
    label = POOLS[node.pool].label
    ready_after = figures["readyNodes"] - (1 if counts_ready else 0)
    waiting = figures["pending"]
    running = node.running
    names = {"drain": _("Draining %(node)s"), "disable": _("Disabling %(node)s"), "revoke": _("Revoking %(node)s")}
    if action in names:
        parts = [names[action] % {"node": node.name} + " " + _ready_clause(label, ready_after)]
        if running:
            parts.append(ngettext("its %(n)d running job goes back to the queue",
                                  "its %(n)d running jobs go back to the queue", running) % {"n": running}
                         if action == "revoke" else
                         ngettext("its %(n)d running job will finish", "its %(n)d running jobs will finish",
                                  running) % {"n": running})
            if action == "revoke" and last_attempts:
                parts.append(ngettext("%(n)d of them, on its last attempt, ends as a system error",
                                      "%(n)d of them, on their last attempt, end as a system error",
                                      last_attempts) % {"n": last_attempts})
        if ready_after == 0 and waiting:
            parts.append(ngettext("%(n)d waiting submission will wait", "%(n)d waiting submissions will wait",
                                  waiting) % {"n": waiting})
        # Joined and ended as the language punctuates a sentence.
        return _("%(sentence)s.") % {"sentence": pgettext("between the parts of a sentence", "; ").join(parts)}
    if action == "enable":
        after = figures["readyNodes"] + (0 if counts_ready else 1)
        return ngettext("Enabling %(node)s gives %(pool)s %(n)d ready node.",
                        "Enabling %(node)s gives %(pool)s %(n)d ready nodes.", after) % {
            "node": node.name, "pool": label, "n": after}
    if action == "check":
        return _("Runs the connectivity check, then a self-check inside %(node)s's own slots; "
                 "it keeps its current verdict meanwhile.") % {"node": node.name}
    if action == "rotate":
        return _("Issues a new join code; the current credential keeps working until the agent joins with it.")
    if action == "edit":
        return _("A new base URL sends %(node)s back to verification: it takes no work until its checks pass "
                 "and it is enabled again.") % {"node": node.name}
    return ""


def canary_lines(node, *, limit: int = 10) -> list[dict]:
    """The node's latest hidden canaries, graded or not, in words and icons."""
    from nodes.models import HiddenCanary

    lines = []
    for canary in HiddenCanary.objects.filter(node_id=node.pk).order_by("-planted_at", "-id")[:limit]:
        if canary.graded_at is None:
            words, icon = _("waiting for its verdict"), "queue"
        elif canary.ok:
            words, icon = _("right"), "ok"
        elif canary.ok is False:
            words, icon = _("wrong: the node was quarantined"), "down"
        else:
            words, icon = _("not judged (infrastructure error, or withdrawn)"), "unknown"
        lines.append({"canary": canary, "at": canary.graded_at or canary.planted_at, "words": words, "icon": icon})
    return lines


def disagreement_lines(node, *, limit: int = 10) -> list[dict]:
    """The node's latest cross-check disagreements with the names of both nodes."""
    from nodes.cross_checks import recent_disagreements

    records = recent_disagreements(node.pk, limit=limit)
    names = dict(JudgeNode.objects.filter(
        pk__in={r.original_node_id for r in records} | {r.check_node_id for r in records}).values_list("pk", "name"))
    return [{"record": r, "original_node": names.get(r.original_node_id, "—"),
             "check_node": names.get(r.check_node_id, "—"),
             "blamed": names.get(r.blamed_node_id) if r.blamed_node_id else None} for r in records]
