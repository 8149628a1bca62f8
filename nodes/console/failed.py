"""The console's failed-work page, `/admin/judgers/failed`: judge jobs whose submissions show
SYSTEM_ERROR and outbox events that died, filtered by pool, node, time and error, each with
why; re-queued one, a selection or all that match, through the bulk rejudge and the event
retry (`judging.services.failed_work`), after a page that states the impact; audited."""

from collections import Counter

from django import forms
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _, gettext_lazy, ngettext
from django.views.decorators.http import require_http_methods

from judging.models import ReconcileReport
from judging.services.bulk_rejudge import rejudge_request
from judging.services.events import events_retry
from judging.services.failed_work import FailedFilter, dead_events, failed_jobs, requeue_selector
from kece.converters import whole_number
from kece.permissions import can_manage_judgers, pages_for
from kece.timezones import within_years, zoned_label
from nodes.models import JudgeNode
from nodes.services import audit
from pools.registry import POOLS

PAGE_SIZE = 50
admins_only = pages_for(can_manage_judgers)


class FilterForm(forms.Form):
    pool = forms.ChoiceField(label=gettext_lazy("Pool"), required=False)
    node = forms.TypedChoiceField(label=gettext_lazy("Node"), required=False, coerce=int, empty_value=None)
    since = forms.DateTimeField(required=False)  # labelled with the zone, as the form is made
    until = forms.DateTimeField(required=False)
    error = forms.CharField(label=gettext_lazy("Error"), required=False, max_length=200)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Typed in the pages' zone (`kece.timezones`), which the label names.
        self.fields["since"].label = zoned_label(_("From (%(zone)s)"))
        self.fields["until"].label = zoned_label(_("Until (%(zone)s)"))
        self.fields["pool"].choices = [("", _("Every pool"))] + [(name, pool.label) for name, pool in POOLS.items()]
        self.fields["node"].choices = [("", _("Every node"))] + list(
            JudgeNode.objects.order_by("name", "id").values_list("id", "name")[:500])

    def clean_since(self):
        return within_years(self.cleaned_data.get("since"))

    def clean_until(self):
        return within_years(self.cleaned_data.get("until"))

    def found(self) -> FailedFilter:
        data = self.cleaned_data
        return FailedFilter(pool=data.get("pool") or "", node_id=data.get("node"), since=data.get("since"),
                            until=data.get("until"), error=(data.get("error") or "").strip())


def _filters(data) -> tuple[FilterForm, FailedFilter | None]:
    form = FilterForm({name: data.get(name, "") for name in ("pool", "node", "since", "until", "error")})
    return form, form.found() if form.is_valid() else None


def _chosen(rows, data, field: str) -> list:
    """What the operator asked for: every row that matches (`scope=all`), or the ticked ones of
    them (a ticked row that no longer matches is left out)."""
    if data.get("scope") == "all":
        return list(rows)
    ids = {whole_number(value) for value in data.getlist(field)} - {None}
    return list(rows.filter(pk__in=ids)) if ids else []


def _impact(action: str, rows: list) -> str:
    if action == "requeue":
        pools = ", ".join(f"{POOLS[pool].label} {count}" for pool, count in sorted(Counter(
            job.pool for job in rows).items()))
        return ngettext(
            "%(count)d submission now showing SYSTEM_ERROR (%(pools)s) will be judged again as a bulk rejudge: at "
            "rejudge priority, a batch at a time, held back while its pool is busy. Its student sees Pending until "
            "the new result; the failed result stays on record.",
            "%(count)d submissions now showing SYSTEM_ERROR (%(pools)s) will be judged again as a bulk rejudge: at "
            "rejudge priority, a batch at a time, held back while their pool is busy. Their students see Pending "
            "until the new results; the failed results stay on record.", len(rows)) % {
            "count": len(rows), "pools": pools}
    return ngettext(
        "%(count)d dead event will be dispatched again with its attempts reset: the rows it derives (best "
        "scores, first accepted, lesson bests, exam scores) are recomputed from the committed results.",
        "%(count)d dead events will be dispatched again with their attempts reset: the rows they derive (best "
        "scores, first accepted, lesson bests, exam scores) are recomputed from the committed results.",
        len(rows)) % {"count": len(rows)}


@require_http_methods(["GET", "POST"])
@admins_only
def failed_work(request):
    data = request.POST if request.method == "POST" else request.GET
    form, found = _filters(data)
    if found is None:
        return render(request, "nodes/console/failed.html", {"form": form}, status=400)
    jobs, events = failed_jobs(found), dead_events(found)
    if request.method == "GET":
        # One page number for both lists: each shows its own page of what matches, and each
        # list is counted once (by its pages).
        job_page = Paginator(jobs, PAGE_SIZE).get_page(request.GET.get("page"))
        event_page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
        return render(request, "nodes/console/failed.html", {
            "form": form, "query": _query_of(form), "jobs": job_page, "events": event_page,
            "job_count": job_page.paginator.count, "event_count": event_page.paginator.count,
            "reconciled": ReconcileReport.objects.order_by("-id").first()})
    action = data.get("action")
    if action not in ("requeue", "retry"):
        return redirect("console-failed")
    rows = _chosen(jobs, data, "job") if action == "requeue" else _chosen(events, data, "event")
    if not rows:
        job_page, event_page = Paginator(jobs, PAGE_SIZE).get_page(1), Paginator(events, PAGE_SIZE).get_page(1)
        return render(request, "nodes/console/failed.html", {
            "form": form, "jobs": job_page, "events": event_page, "job_count": job_page.paginator.count,
            "event_count": event_page.paginator.count, "error": _("Nothing was chosen: tick the rows to send round again, or "
                                                      "choose all that match.")}, status=400)
    if data.get("confirm") != "1":
        return render(request, "nodes/console/failed_confirm.html", {
            "form": form, "action": action, "rows": rows, "impact": _impact(action, rows),
            "scope": data.get("scope", ""), "field": "job" if action == "requeue" else "event"})
    now = timezone.now()
    if action == "requeue":
        operation = rejudge_request(selector=requeue_selector(rows), actor=request.user, now=now)
        audit(actor=request.user, action="failed_requeued", before={"jobs": [job.pk for job in rows]},
              after={"rejudge": operation.pk})
        return redirect("console-rejudges")
    retried = events_retry(event_ids=[event.pk for event in rows], now=now)
    audit(actor=request.user, action="events_retried", before={"events": [event.pk for event in rows]},
          after={"retried": retried})
    return redirect(f"{request.path}?{_query_of(form)}")


def _query_of(form) -> str:
    from urllib.parse import urlencode

    return urlencode({name: form.data.get(name, "") for name in form.fields if form.data.get(name)})
