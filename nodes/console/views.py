"""The operators' console at `/admin/judgers`: thin views over the admin API's services and
reads (`nodes.services`, `nodes.checks`, `nodes.selectors`) — no second way to register,
check, enable, drain, disable, revoke, rotate or edit a node.

Parts of a page that change live are fragments of the same views (asked for with htmx's
`HX-Request` header); the live channel (`nodes.console.consumers`) tells the page when to
fetch them again.
"""

from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from rest_framework.exceptions import ValidationError

from judging.capacity import pool_advice, pool_loads
from judging.clock import clock_status
from judging.display import listed
from judging.models import JobState, JudgeJob
from judging.selectors import ready_nodes
from judging.timing import offline_after
from kece.api import validated
from kece.converters import whole_number
from kece.errors import Busy, DomainError, Invalid, NotFound, NotVerified, RevisionConflict
from kece.permissions import can_manage_judgers, pages_for
from kece.timezones import within_years, zone_name
from nodes.checks import node_check_start
from nodes.console import display, live
from nodes.models import DesiredState, JudgeHostGroup, NodeAudit, NodeCheck, ObservedState
from nodes.selectors import (
    filter_nodes, node_audit, node_checks, node_errors, nodes_with_running, pool_figures, pool_node_counts,
)
from nodes.services import (
    MAX_SLOTS_LIMIT, SYSTEM_ACTOR, host_group_create, host_group_update, node_issue_join_code, node_register,
    node_revoke, node_update,
)
from pools.registry import POOLS

PAGE_SIZE = 50
# Items of a check that come from the connectivity probe; the rest are the self-check's.
CONNECTIVITY_ITEMS = {"connectivity", "tls", "identity", "pool", "protocol", "runtime"}
ACTIONS = ("check", "enable", "drain", "disable", "revoke", "rotate", "edit")
STATE_OF_ACTION = {"enable": DesiredState.ENABLED, "drain": DesiredState.DRAINING, "disable": DesiredState.DISABLED}


# Anonymous → the login page; signed in without `nodes.manage_judgers` → the 403 page.
admins_only = pages_for(can_manage_judgers)


def _fragment(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def _node(node_id: int):
    node = nodes_with_running().select_related("host_group").filter(pk=node_id).first()
    if node is None:
        raise Http404
    return node


def _figures(now) -> dict[str, dict]:
    return {row["pool"]: row for row in pool_figures(now=now)}


def _counts_ready(node, *, now) -> bool:
    return ready_nodes(now=now).filter(pk=node.pk).exists()


def _refusal(exc: DomainError, *, node=None) -> str:
    """A service's refusal as a sentence an operator can act on."""
    name = node.name if node is not None else ""
    if isinstance(exc, RevisionConflict) and node is not None:
        last = NodeAudit.objects.filter(node=node).order_by("-created_at", "-id").first()
        if last is not None:
            return _("%(node)s was changed by %(who)s at %(time)s %(zone)s — reload to see the change.") % {
                "node": name, "who": last.actor_name or _("the system"), "zone": zone_name(),
                "time": timezone.localtime(last.created_at).strftime("%H:%M")}
        return _("%(node)s was changed meanwhile — reload to see the change.") % {"node": name}
    if isinstance(exc, NotVerified) and node is not None and node.revoked_at is not None:
        return _("%(node)s was revoked: rotate its credential and let it join again, then check and enable "
                 "it.") % {"node": name}
    if isinstance(exc, NotVerified):
        return _("%(node)s cannot be enabled yet: it needs a fresh heartbeat and a passing self-check for "
                 "its current configuration.") % {"node": name}
    if isinstance(exc, Busy):
        return _("A check is already running for %(node)s.") % {"node": name}
    if isinstance(exc, Invalid) and (errors := field_errors(exc)):
        return next(iter(errors.values()))
    return _("That was refused: %(reason)s") % {"reason": exc.detail}


# The form's field each of the service's field names is shown beside.
FORM_FIELDS = {"name": "name", "pool": "pool", "baseUrl": "base_url", "hostGroupId": "host_group",
               "maxSlots": "max_slots"}


def field_errors(exc: Invalid) -> dict:
    """Each refused field's problem, as a sentence an operator can act on, by form field."""
    fields = exc.fields or {}
    words = {
        "name": _("That name is already taken.") if "already taken" in fields.get("name", [])
        else _("The name must be 1 to 100 characters."),
        "pool": _("Choose one of the pools."),
        "baseUrl": _("The base URL was refused: %(reason)s") % {"reason": exc.field_details.get("baseUrl", exc.detail)},
        "hostGroupId": _("Choose one of the host groups."),
        "maxSlots": _("Max slots must be a whole number from 1 to %(n)d.") % {"n": MAX_SLOTS_LIMIT},
    }
    return {FORM_FIELDS[field]: words[field] for field in words if field in fields}


# --- the fleet -------------------------------------------------------------------------------

def _filters(request) -> dict:
    query = request.GET
    group = query.get("group", "")
    return {
        "pool": query.get("pool", "") if query.get("pool", "") in POOLS else "",
        "state": query.get("state", "") if query.get("state", "") in DesiredState.values else "",
        "observed": query.get("observed", "") if query.get("observed", "") in ObservedState.values else "",
        "group": whole_number(group),
        "q": query.get("q", "").strip()[:100],
    }


def _rows(nodes, *, now) -> list[dict]:
    checking = set(NodeCheck.objects.filter(node_id__in=[n.pk for n in nodes], status=NodeCheck.Status.RUNNING)
                   .values_list("node_id", flat=True))
    return [display.node_row(n, now=now, running_check=n.pk in checking, host_group_name=n.host_group.name)
            for n in nodes]


def _strip(now) -> list[dict]:
    """The pool strip: each pool's figures, its nodes, and whether its ready slots carry the
    recent load (`judging.capacity`)."""
    counts = pool_node_counts(now=now)
    advice = {pool: pool_advice(pool=pool, arrival_rate=load.arrival_rate, judge_seconds=load.judge_seconds,
                                ready_slots=counts.get(pool, {}).get("capacity", 0),
                                max_utilisation=settings.KECE_CAPACITY_UTILISATION)
              for pool, load in pool_loads(now=now).items()}
    return display.strip_rows(pool_figures(now=now), counts, advice, window_s=settings.KECE_CAPACITY_WINDOW_S)


@require_GET
@admins_only
def fleet(request):
    now = timezone.now()
    chosen = _filters(request)
    nodes = filter_nodes(nodes_with_running(), pool=chosen["pool"], state=chosen["state"],
                         observed=chosen["observed"], host_group_id=chosen["group"], name=chosen["q"], now=now)
    page = Paginator(nodes, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "strip": _strip(now),
        "rows": _rows(list(page), now=now), "page": page, "chosen": chosen, "query": query.urlencode(),
        "pools": [(name, pool.label) for name, pool in POOLS.items()],
        "states": list(display.CONFIG_WORDS.items()), "observed_states": [
            (state, words) for state, (words, _icon) in display.OBSERVED_WORDS.items()],
        "groups": JudgeHostGroup.objects.order_by("name", "id"), "now": now, "clock": clock_status(),
    }
    return render(request, "nodes/console/_fleet.html" if _fragment(request) else "nodes/console/fleet.html",
                  context)


# --- one node --------------------------------------------------------------------------------

def _check_parts(check) -> dict:
    items = check.items or []
    return {"check": check, "connectivity": [{**i, "words": display.check_item_words(i["name"])} for i in items
                                             if i.get("name") in CONNECTIVITY_ITEMS],
            "self_check": [i for i in items if i.get("name") not in CONNECTIVITY_ITEMS]}


def _timeline(node, *, observed, checks, errors, audit) -> list[dict]:
    """The audit (who, what, before → after) and what the system did, newest first."""
    entries = []
    # Names only for the groups a change moved the node between: most timelines (and every
    # live refresh of one) show no such change, and read no group at all.
    moved = {group for entry in audit if entry.before
             and entry.before.get("host_group_id") != entry.after.get("host_group_id")
             for group in (entry.before.get("host_group_id"), entry.after.get("host_group_id"))}
    group_names = dict(JudgeHostGroup.objects.filter(pk__in=moved).values_list("pk", "name")) if moved else {}
    for entry in audit:
        who = entry.actor_name if entry.actor_name not in ("", SYSTEM_ACTOR) else _("the system")
        entries.append({"at": entry.created_at, "who": who,
                        "what": display.audit_words(entry.action),
                        "changes": display.setting_changes(entry.before, entry.after, group_names=group_names),
                        "reason": display.quarantine_reason_words(entry.after.get("reason", ""))
                        if entry.action == "quarantine" else entry.after.get("reason", "")})
    for check in checks:
        if check.finished_at is not None:
            failed = [display.check_item_words(i["name"]) for i in check.items or [] if not i.get("ok")]
            what = _("check passed") if check.status == NodeCheck.Status.PASSED else _("check failed")
            entries.append({"at": check.finished_at, "who": _("the system"), "what": what, "changes": [],
                            "reason": listed(failed)})
    for job in errors:
        what = display.job_error_words(job.error)
        entries.append({"at": job.updated_at, "who": _("the system"), "what": what, "changes": [],
                        "reason": _("job %(job)d") % {"job": job.pk}})
    if observed == ObservedState.OFFLINE and node.last_heartbeat_at is not None:
        # Not recorded as an event: derived from the last heartbeat the server received.
        entries.append({"at": node.last_heartbeat_at + offline_after(), "who": _("the system"),
                        "what": _("went offline"), "changes": [], "reason": display.reason(node, observed)})
    return sorted(entries, key=lambda e: e["at"], reverse=True)


def _held_jobs(node, *, now) -> list[dict]:
    jobs = JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING).order_by("started_at", "id")
    return [{"job": job, "since": display.ago(job.started_at, now=now), "phase": display.phase_words(job.progress_phase),
             "lease_left": display.duration(max(0, int((job.lease_until - now).total_seconds())))
             if job.lease_until else "—"} for job in jobs]


def _detail_context(node, *, now) -> dict:
    checks = list(node_checks(node))
    errors = list(node_errors(node))
    row = display.node_row(node, now=now, running_check=any(c.status == NodeCheck.Status.RUNNING for c in checks),
                           host_group_name=node.host_group.name)
    return {"row": row, "node": node, "checks": [_check_parts(c) for c in checks],
            "errors": [{"job": job, "words": display.job_error_words(job.error)} for job in errors],
            "jobs": _held_jobs(node, now=now), "now": now, "canaries": display.canary_lines(node),
            "disagreements": display.disagreement_lines(node),
            "timeline": _timeline(node, observed=row["observed"], checks=checks, errors=errors,
                                  audit=list(node_audit(node)))}


@require_GET
@admins_only
def node_detail(request, node_id: int):
    now = timezone.now()
    context = _detail_context(_node(node_id), now=now)
    return render(request, "nodes/console/_node_live.html" if _fragment(request) else "nodes/console/node.html",
                  context)


# --- registration and joining -------------------------------------------------------------------

def _join_code_key(node_id: int) -> str:
    return f"console-join-code-{node_id}"


def _show_code_once(request, node_id: int, issued) -> None:
    # Kept in the session only until the join page shows it: that page takes it out, so a
    # reload or the back button finds nothing to show.
    request.session[_join_code_key(node_id)] = {"code": issued.code, "expiresAt": issued.expires_at.isoformat()}


def _register_context(**extra) -> dict:
    return {"pools": [(name, pool.label) for name, pool in POOLS.items()],
            "groups": JudgeHostGroup.objects.order_by("name", "id"), "max_slots_limit": MAX_SLOTS_LIMIT, **extra}


@require_http_methods(["GET", "POST"])
@admins_only
def register(request):
    if request.method == "GET":
        return render(request, "nodes/console/register.html", _register_context(form={}))
    form = {k: request.POST.get(k, "").strip() for k in ("name", "pool", "base_url", "host_group", "max_slots")}
    try:
        slots, group = whole_number(form["max_slots"]), whole_number(form["host_group"])
        node, issued = node_register(name=form["name"], pool=form["pool"], base_url=form["base_url"],
                                     host_group_id=group, max_slots=slots, actor=request.user, now=timezone.now())
    except Invalid as exc:
        errors = field_errors(exc)
        return render(request, "nodes/console/register.html", _register_context(
            form=form, errors=errors, error="" if errors else _refusal(exc)), status=400)
    _show_code_once(request, node.pk, issued)
    live.hint(node.pool)
    return redirect("console-join", node_id=node.pk)


def _progress_context(node, *, now) -> dict:
    check = NodeCheck.objects.filter(node=node).first()
    row = display.node_row(node, now=now, running_check=check is not None and check.status == NodeCheck.Status.RUNNING,
                           host_group_name=node.host_group.name)
    return {"node": node, "row": row, "joined": node.session_epoch > 0 and node.last_heartbeat_at is not None,
            "check": _check_parts(check) if check else None, "now": now,
            "can_enable": node.desired_state != DesiredState.ENABLED and row["check_icon"] == "ok"}


@require_GET
@admins_only
def join(request, node_id: int):
    now = timezone.now()
    node = _node(node_id)
    context = _progress_context(node, now=now)
    if _fragment(request):
        return render(request, "nodes/console/_join_progress.html", context)
    shown = request.session.pop(_join_code_key(node.pk), None)
    context["code"] = shown["code"] if shown else ""
    context["expires_at"] = parse_datetime(shown["expiresAt"]) if shown else None
    # The internal listener agents use; the page's own address only where one server is both.
    context["control_url"] = settings.KECE_NODE_API_URL or request.build_absolute_uri("/").rstrip("/")
    # Compose's agent for a pool keeps one credential: only the node of that name is it.
    context["compose_agent"] = node.name == f"agent-{node.pool}"
    context["health_port"] = urlsplit(node.base_url).port or 443
    return render(request, "nodes/console/join.html", context)


# --- actions ---------------------------------------------------------------------------------

def _on_last_attempt(node) -> int:
    """Its running jobs that a revoke fails instead of requeueing (`release_node_leases`)."""
    return JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING,
                                   attempts__gte=settings.KECE_MAX_ATTEMPTS).count()


def _action_context(node, action: str, *, now, **extra) -> dict:
    figures = _figures(now)[node.pool]
    return {"node": node, "action": action, "row": display.node_row(node, now=now, running_check=False,
                                                                    host_group_name=node.host_group.name),
            "impact": display.impact(action, node=node, figures=figures, counts_ready=_counts_ready(node, now=now),
                                     last_attempts=_on_last_attempt(node) if action == "revoke" else 0),
            "groups": JudgeHostGroup.objects.order_by("name", "id"), "form": {}, **extra}


def _edit_changes(post) -> dict:
    changes = {}
    if post.get("name", "").strip():
        changes["name"] = post["name"].strip()
    if post.get("max_slots", "").strip():
        value = post["max_slots"].strip()
        number = whole_number(value)
        changes["max_slots"] = value if number is None else number  # the service refuses what is not a number
    if post.get("base_url", "").strip():
        changes["base_url"] = post["base_url"].strip()
    if (group := whole_number(post.get("host_group"))) is not None:
        changes["host_group_id"] = group
    return changes


def _posted_revision(request) -> int:
    """The revision the form was read at; -1, which no row has, when it is not a number."""
    revision = whole_number(request.POST.get("revision"))
    return -1 if revision is None else revision


def _perform(request, node, action: str, *, now):
    """Do the action through its service; a redirect to follow, or None after a join code was
    issued (the join page shows it)."""
    revision = _posted_revision(request)
    if action == "check":
        node_check_start(node_id=node.pk, actor=request.user, now=now)
    elif action in STATE_OF_ACTION:
        node_update(node_id=node.pk, revision=revision, changes={"desired_state": STATE_OF_ACTION[action]},
                    actor=request.user, now=now)
    elif action == "edit":
        node_update(node_id=node.pk, revision=revision, changes=_edit_changes(request.POST), actor=request.user,
                    now=now)
    elif action == "revoke":
        node_revoke(node_id=node.pk, reason=request.POST.get("reason", "").strip(), actor=request.user, now=now)
    elif action == "rotate":
        issued = node_issue_join_code(node_id=node.pk, actor=request.user, now=now, action="rotate")
        _show_code_once(request, node.pk, issued)
        return reverse("console-join", kwargs={"node_id": node.pk})
    return request.POST.get("next") if request.POST.get("next", "").startswith("/admin/judgers") else \
        reverse("console-node", kwargs={"node_id": node.pk})


@require_http_methods(["GET", "POST"])
@admins_only
def act(request, node_id: int, action: str):
    if action not in ACTIONS:
        raise Http404
    now = timezone.now()
    node = _node(node_id)
    if request.method == "GET":
        return render(request, "nodes/console/confirm.html", _action_context(node, action, now=now))
    if action == "revoke" and not request.POST.get("reason", "").strip():
        return render(request, "nodes/console/confirm.html", _action_context(
            node, action, now=now, error=_("Say why %(node)s is revoked: the reason is required.") % {
                "node": node.name}), status=400)
    try:
        target = _perform(request, node, action, now=now)
    except NotFound:
        raise Http404 from None
    except DomainError as exc:
        return render(request, "nodes/console/confirm.html", _action_context(
            node, action, now=now, error=_refusal(exc, node=node), form=request.POST), status=409
            if isinstance(exc, (RevisionConflict, Busy)) else 400)
    live.hint(node.pool)
    return redirect(target)


# --- host groups -------------------------------------------------------------------------------

@require_http_methods(["GET", "POST"])
@admins_only
def host_groups(request):
    error, form, status = "", {}, 200
    if request.method == "POST":
        form = {k: request.POST.get(k, "").strip() for k in ("name", "host_id", "total_slots")}
        slots = whole_number(form["total_slots"])
        try:
            host_group_create(name=form["name"], host_id=form["host_id"], total_slots=slots, actor=request.user)
            return redirect("console-host-groups")
        except Invalid as exc:
            error, status = _group_refusal(exc), 400
    return render(request, "nodes/console/host_groups.html",
                  {"groups": JudgeHostGroup.objects.order_by("name", "id"), "error": error, "form": form},
                  status=status)


def _group_refusal(exc: DomainError) -> str:
    if isinstance(exc, RevisionConflict):
        return _("The host group was changed meanwhile — reload to see the change.")
    fields = exc.fields or {} if isinstance(exc, Invalid) else {}
    if "totalSlots" in fields:
        return _("Total slots must be a whole number from 1 to 4096.")
    if "hostId" in fields:
        return _("The host id must be 1 to 200 characters.")
    return _refusal(exc)


@require_POST
@admins_only
def host_group_edit(request, group_id: int):
    revision = _posted_revision(request)
    if request.POST.get("status") in ("ACTIVE", "DISABLED"):  # the Disable / Enable button
        changes = {"status": request.POST["status"]}
    else:
        changes = {"total_slots": whole_number(request.POST.get("total_slots", "").strip())}
    try:
        host_group_update(group_id=group_id, revision=revision, changes=changes, actor=request.user)
    except NotFound:
        raise Http404 from None
    except DomainError as exc:
        return render(request, "nodes/console/host_groups.html",
                      {"groups": JudgeHostGroup.objects.order_by("name", "id"), "error": _group_refusal(exc),
                       "form": {}}, status=409 if isinstance(exc, RevisionConflict) else 400)
    return redirect("console-host-groups")


# --- bulk rejudges ------------------------------------------------------------------------------

@require_GET
@admins_only
def rejudges(request):
    from judging.models import RejudgeOperation
    from judging.services.bulk_rejudge import rejudge_progress

    page = Paginator(RejudgeOperation.objects.order_by("-id"), PAGE_SIZE).get_page(request.GET.get("page"))
    words = {"RUNNING": _("running"), "DONE": _("done"), "CANCELLED": _("cancelled")}
    return render(request, "nodes/console/rejudges.html",
                  {"page": page,
                   "operations": [{**rejudge_progress(op), "created_at": op.created_at, "selector": op.selector,
                                   # Kept in UTC; shown in the pages' zone like every other time.
                                   "since": parse_datetime(op.selector.get("since") or ""),
                                   "state_words": words.get(op.state, op.state)} for op in page.object_list]})


@require_POST
@admins_only
def node_rejudge(request, node_id: int):
    """Rejudge what the node judged since a moment (a `datetime-local` field, in the pages' zone)."""
    from judging.api.admin import BulkRejudgeIn
    from judging.services.bulk_rejudge import rejudge_request

    node = _node(node_id)
    raw = request.POST.get("since", "").strip()
    try:
        # The selector the admin API would send: a date and a time that exist, in the pages' zone
        # (`kece.timezones`) unless it says otherwise.
        selector = validated(BulkRejudgeIn, {"nodeId": node.pk, "since": raw})
        within_years(selector["since"])
        rejudge_request(selector=selector, actor=request.user, now=timezone.now())
    except (ValidationError, forms.ValidationError, OverflowError):
        status, error = 400, _("“%(since)s” is not a date and time to rejudge from; give one such as "
                               "2026-12-01 09:00 (%(zone)s).") % {"since": raw, "zone": zone_name()}
    except DomainError as exc:
        status, error = exc.status, _refusal(exc, node=node)
    else:
        return redirect("console-rejudges")
    context = {**_detail_context(node, now=timezone.now()), "rejudge_error": error, "since": raw}
    return render(request, "nodes/console/node.html", context, status=status)


@require_POST
@admins_only
def rejudge_cancel_view(request, rejudge_id: int):
    from judging.services.bulk_rejudge import rejudge_cancel

    try:
        rejudge_cancel(rejudge_id=rejudge_id, now=timezone.now())
    except NotFound:
        raise Http404
    return redirect("console-rejudges")
