"""The operators' console at /admin/judgers, through real URLs: who may open it, what it
shows, and that its actions go through the admin API's services (rows and audit checked)."""

import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from judging.models import JudgeJob
from nodes.models import DesiredState, JoinCode, JudgeNode, NodeAudit, NodeCheck
from nodes.services import node_issue_join_code, node_update
from tests.api.helpers import make_admin, make_teacher
from tests.factories import HostGroupFactory, make_node
from tests.judging.helpers import claim, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(client):
    client.force_login(make_admin("alice"))
    return client


def test_an_anonymous_visitor_is_sent_to_sign_in(client):
    response = client.get("/admin/judgers?pool=python")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/admin/judgers%3Fpool%3Dpython"


@pytest.mark.parametrize("path", ["/admin/judgers", "/admin/judgers/register", "/admin/judgers/host-groups"])
def test_a_teacher_gets_the_403_page(client, path):
    client.force_login(make_teacher())
    response = client.get(path)
    assert response.status_code == 403
    assert "Your account may not open this page." in response.content.decode()


def test_a_teacher_cannot_act_on_a_node(client, node_a):
    node, _ = node_a
    client.force_login(make_teacher())
    assert client.post(f"/admin/judgers/{node.pk}/drain", {"revision": node.revision}).status_code == 403
    node.refresh_from_db()
    assert node.desired_state == DesiredState.ENABLED


def test_the_navigation_shows_judgers_to_admins_with_a_badge_of_unwell_nodes(admin, client):
    make_node(pool="python", name="up")
    make_node(pool="cpp", name="down", heartbeat=False)
    page = admin.get("/problems").content.decode()
    assert re.search(r'id="nav-judgers">Judgers <span class="badge"', page)
    assert "1 node offline or unhealthy" in page


def test_the_navigation_tells_which_console_page_is_open(admin):
    """A screen reader (and the link's look) says where the operator is: the top bar's
    section and the console's own link, a node's page under "All judgers"."""
    node, _ = make_node(pool="python", name="here")
    current = lambda page: re.findall(r'<a href="[^"]*"[^>]*aria-current="page"[^>]*>([^<]+)', page)
    assert current(admin.get(f"/admin/judgers/{node.pk}").content.decode()) == ["Judgers", "All judgers"]
    assert current(admin.get("/admin/judgers/host-groups").content.decode()) == ["Judgers", "Host groups"]
    assert current(admin.get("/admin/judgers/register").content.decode()) == ["Judgers", "Register a node"]
    assert current(admin.get("/problems").content.decode()) == ["Problems"]


def test_the_navigation_shows_nothing_to_others(client):
    make_node(pool="cpp", name="down", heartbeat=False)
    client.force_login(make_teacher())
    assert "nav-judgers" not in client.get("/problems").content.decode()


def test_the_strip_raises_an_alarm_for_a_pool_with_work_and_no_judge(admin, student, problem):
    for _ in range(3):
        submit(student, problem, language="python")
    page = admin.get("/admin/judgers").content.decode()
    assert "Python: 3 waiting, no judge can take them" in page and "refused" not in page


def test_the_strip_says_when_a_pool_without_a_judge_refuses_practice(admin, student, problem, settings):
    for _ in range(3):
        submit(student, problem, language="python")
    settings.KECE_THROTTLE_BACKLOG = {"*": 3}
    page = admin.get("/admin/judgers").content.decode()
    assert "Python: 3 waiting, no judge can take them; practice submits are refused until one is back" in page


def test_the_strip_says_when_a_pool_throttles_and_splits_its_queue_by_class(admin, student, problem, settings):
    from judging.models import PriorityClass

    make_node(pool="python", name="py-ready")
    for _ in range(2):
        submit(student, problem, language="python")
    submit(student, problem, language="python", priority_class=PriorityClass.EXAM)
    page = admin.get("/admin/judgers").content.decode()
    assert "Python is throttling" not in page and '<dd class="by-class">1 / 2 / 0</dd>' in page
    settings.KECE_THROTTLE_BACKLOG = {"*": 3}
    page = admin.get("/admin/judgers").content.decode()
    assert "Python is throttling: practice submits are refused and bulk rejudges paused" in page


def test_the_table_shows_state_in_words_and_filters_live_in_the_url(admin):
    group = HostGroupFactory(name="rack-1")
    make_node(pool="python", name="py-ready", host_group=group)
    make_node(pool="python", name="py-off", heartbeat=False)
    make_node(pool="cpp", name="cpp-1")
    page = admin.get("/admin/judgers").content.decode()
    assert "Ready" in page and "Offline" in page and "passed for revision 1" in page
    only = admin.get("/admin/judgers?pool=python&observed=offline").content.decode()
    assert "py-off" in only and "py-ready" not in only and "cpp-1" not in only
    by_group = admin.get(f"/admin/judgers?group={group.pk}").content.decode()
    assert "py-ready" in by_group and "py-off" not in by_group
    assert "cpp-1" in admin.get("/admin/judgers?q=CPP").content.decode()


# Session, user and its permissions (3), the badge's node counts (2), the pool figures (3, and
# one per pool with exam or practice work queued: none here), the strip's node counts (2), the
# page's nodes, their running checks, the host groups.
# With the capacity measure not cached (`judging.capacity.pool_loads`): one grouped read more.
LIST_PAGE_STATEMENTS = 15


def _list_queries(client, count: int) -> int:
    group = HostGroupFactory(total_slots=4096)
    JudgeNode.objects.bulk_create([
        JudgeNode(name=f"bulk-{count}-{i}", pool="python", base_url="https://127.0.0.1:8443", host_group=group,
                  max_slots=2) for i in range(count)])
    cache.clear()
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/admin/judgers").status_code == 200
    return len(queries)


def test_the_list_page_reads_a_fixed_number_of_statements_however_many_nodes(admin):
    fifty = _list_queries(admin, 50)
    JudgeNode.objects.all().delete()
    five_hundred = _list_queries(admin, 500)
    assert fifty == five_hundred == LIST_PAGE_STATEMENTS


def _register(client, HTTP_ACCEPT_LANGUAGE="en", **fields):
    group = HostGroupFactory()
    data = {"name": "python-9", "pool": "python", "base_url": "https://127.0.0.1:8443",
            "host_group": group.pk, "max_slots": "2", **fields}
    return client.post("/admin/judgers/register", data, HTTP_ACCEPT_LANGUAGE=HTTP_ACCEPT_LANGUAGE)


def test_a_refused_base_url_says_why_in_the_admins_language(admin):
    english = _register(admin, base_url="https://127.0.0.1:22").content.decode()
    assert "The base URL was refused: Port 22 is not an approved port (approved: 443, 8443)." in english
    chinese = _register(admin, base_url="https://127.0.0.1:22", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "基础 URL 被拒绝：端口 22 不在允许的端口之内（允许：443, 8443）。" in chinese
    assert not JudgeNode.objects.exists()


def test_a_refused_port_names_the_approved_ranges(admin, settings):
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (9441, 9445)]
    page = _register(admin, base_url="https://127.0.0.1:9997").content.decode()
    assert "Port 9997 is not an approved port (approved: 443, 9441–9445)." in page


def test_registering_shows_the_join_code_once(admin):
    response = _register(admin)
    node = JudgeNode.objects.get(name="python-9")
    assert response.status_code == 302 and response["Location"] == f"/admin/judgers/{node.pk}/join"
    first = admin.get(response["Location"])
    code = re.search(r'<code id="join-code">([^<]+)</code>', first.content.decode()).group(1)
    assert JoinCode.objects.filter(node=node, used_at__isnull=True).count() == 1
    command = first.content.decode()
    # The site's own address where nothing says otherwise (one server is both), over plain HTTP
    # no CA; not Compose's agent-python, so no Compose line that would overwrite its credential.
    assert "JUDGE_POOL=python JUDGE_CONTROL_URL=http://testserver \\\n" in command
    assert "JUDGE_CA_FILE" not in command and "set-join-code.sh" not in command
    assert first["Cache-Control"] == "no-store"
    again = admin.get(response["Location"]).content.decode()
    assert code not in again
    assert "The join code was shown once and is not shown again." in again
    assert NodeAudit.objects.filter(node=node, action="register", actor_name="alice").exists()


def test_the_agents_command_names_the_internal_listener_and_its_ca_and_composes_agent_its_line(admin, settings):
    """Behind a proxy the page's address is the public site, which refuses the node API:
    the command names the listener agents use, and its private CA."""
    settings.KECE_NODE_API_URL = "https://kece-internal:8443"
    response = _register(admin, name="agent-python")
    command = admin.get(response["Location"]).content.decode()
    assert "JUDGE_CONTROL_URL=https://kece-internal:8443 \\\nJUDGE_CA_FILE=/etc/kece-judge/internal-ca.pem \\\n" in command
    assert "./set-join-code.sh python" in command and "docker compose up -d agent-python" in command


def test_a_refused_registration_says_why_in_a_sentence_and_keeps_the_form(admin):
    make_node(name="python-9")
    response = _register(admin, max_slots="500")
    page = response.content.decode()
    assert response.status_code == 400
    assert "Max slots must be a whole number from 1 to 256." in page
    assert 'value="python-9"' in page
    assert "That name is already taken." in _register(admin, max_slots="2").content.decode()


def test_every_refused_field_is_named_beside_it_and_what_was_sent_comes_back(admin):
    """A form sent with several fields wrong says each beside its field, tied to it for a
    screen reader, and shows what was sent (an empty Max slots stays empty, not the 2 a new
    form suggests)."""
    response = _register(admin, name="", base_url="", max_slots="")
    page = response.content.decode()
    assert response.status_code == 400 and not JudgeNode.objects.exists()
    assert "The node was not registered: 3 fields need a change." in page
    for field, words in [("r-name", "The name must be 1 to 100 characters."),
                         ("r-url", "The base URL was refused: baseUrl must be an https:// URL."),
                         ("r-slots", "Max slots must be a whole number from 1 to 256.")]:
        assert re.search(rf'<p id="{field}-error" class="field-error">.*{re.escape(words)}</p>', page), field
        assert re.search(rf'<(input|select) id="{field}"[^>]*aria-invalid="true"', page), field
        assert re.search(rf'<(input|select) id="{field}"[^>]*aria-describedby="{field}-error', page), field
    assert 'id="r-pool-error"' not in page and 'id="r-group-error"' not in page
    assert re.search(r'<input id="r-slots"[^>]*value=""', page)
    assert re.search(r'<input id="r-slots"[^>]*value="2"', admin.get("/admin/judgers/register").content.decode())


def test_the_confirmation_says_the_impact_from_the_pool_figures(admin, student, problem, settings):
    node, identity = make_node(pool="python", name="python-2", max_slots=4)
    make_node(pool="python", name="python-3")
    for _ in range(5):
        submit(student, problem, language="python")
    claim(identity, free_slots=3)
    page = admin.get(f"/admin/judgers/{node.pk}/drain").content.decode()
    assert "Draining python-2 leaves Python with 1 ready node; its 3 running jobs will finish." in page
    JudgeNode.objects.filter(name="python-3").update(desired_state=DesiredState.DISABLED)
    page = admin.get(f"/admin/judgers/{node.pk}/disable").content.decode()
    assert ("Disabling python-2 leaves Python with no ready node; its 3 running jobs will finish; "
            "2 waiting submissions will wait.") in page
    # In Chinese, the sentences the page puts together end and join as Chinese does.
    page = admin.get(f"/admin/judgers/{node.pk}/disable", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "停用 python-2 后 Python 将没有就绪节点；其 3 个运行中的任务会完成；2 个等待中的提交将继续等待。" in page
    assert "当前：就绪，运行中 3 / 4。" in page
    # A revoke requeues them, but one on its last attempt would end as a system error: said so.
    JudgeJob.objects.filter(pk=JudgeJob.objects.filter(node_id=node.pk).order_by("id")[0].pk).update(
        attempts=settings.KECE_MAX_ATTEMPTS)
    page = admin.get(f"/admin/judgers/{node.pk}/revoke").content.decode()
    assert ("its 3 running jobs go back to the queue; 1 of them, on its last attempt, ends as a system error; "
            "2 waiting submissions will wait.") in page
    admin.post(f"/admin/judgers/{node.pk}/revoke", {"revision": node.revision, "reason": "disk failing"})
    assert sorted(JudgeJob.objects.filter(last_node_id=node.pk).values_list("state", flat=True)) == [
        "FAILED", "QUEUED", "QUEUED"]


def test_draining_through_the_console_uses_the_service_and_is_audited(admin, node_a):
    node, _ = node_a
    response = admin.post(f"/admin/judgers/{node.pk}/drain", {"revision": node.revision})
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.desired_state == DesiredState.DRAINING
    assert NodeAudit.objects.filter(node=node, action="update", actor_name="alice").exists()


def test_a_stale_revision_is_shown_in_words_not_overwritten(admin, node_a):
    node, _ = node_a
    seen = node.revision
    bob = make_admin("bob")
    node_update(node_id=node.pk, revision=seen, changes={"max_slots": 7}, actor=bob, now=node.created_at)
    response = admin.post(f"/admin/judgers/{node.pk}/disable", {"revision": seen})
    page = response.content.decode()
    assert response.status_code == 409
    audit = NodeAudit.objects.filter(node=node).first()
    assert f"node-a was changed by bob at {audit.created_at:%H:%M} UTC — reload to see the change." in page
    node.refresh_from_db()
    assert node.desired_state == DesiredState.ENABLED and node.max_slots == 7


def test_revoking_needs_a_reason(admin, node_a):
    node, _ = node_a
    response = admin.post(f"/admin/judgers/{node.pk}/revoke", {"revision": node.revision, "reason": " "})
    assert response.status_code == 400
    assert "Say why node-a is revoked: the reason is required." in response.content.decode()
    node.refresh_from_db()
    assert node.revoked_at is None
    admin.post(f"/admin/judgers/{node.pk}/revoke", {"revision": node.revision, "reason": "disk failing"})
    node.refresh_from_db()
    assert node.revoked_at is not None
    assert NodeAudit.objects.get(node=node, action="revoke").after["reason"] == "disk failing"


def test_a_revoked_node_says_so_and_offers_only_what_brings_it_back(admin, node_a):
    """Revoked, a node is not shown as merely disabled: its state and reason say revoked and
    how to re-admit it; its menu offers the credential rotation, the edit and a revoke (which
    stops a rotation's code), not a check or an enable, and an enable posted anyway says what
    to do instead. Revoked again after a rotation, the rotation's code no longer joins."""
    node, _ = node_a
    admin.post(f"/admin/judgers/{node.pk}/revoke", {"revision": node.revision, "reason": "disk failing"})
    node.refresh_from_db()
    revision = node.revision
    page = admin.get(f"/admin/judgers/{node.pk}").content.decode()
    assert '<dd class="config">Revoked</dd>' in page
    assert "Revoked: its credential no longer works. Rotate its credential to let it join again." in page
    menu = page[page.index('<details class="actions-menu">'):]
    menu = menu[:menu.index("</details>")]
    assert [action for action in ("check", "enable", "drain", "disable", "edit", "rotate", "revoke")
            if f"/admin/judgers/{node.pk}/{action}\"" in menu] == ["edit", "rotate", "revoke"]
    assert '<td class="config">Revoked</td>' in admin.get("/admin/judgers").content.decode()
    refused = admin.post(f"/admin/judgers/{node.pk}/enable", {"revision": revision})
    assert refused.status_code == 400
    assert "node-a was revoked: rotate its credential and let it join again, then check and enable it." in \
        refused.content.decode()
    rotated = node_issue_join_code(node_id=node.pk, actor=None, now=timezone.now(), action="rotate")
    JudgeNode.objects.filter(pk=node.pk).update(desired_state=DesiredState.DRAINING)
    admin.post(f"/admin/judgers/{node.pk}/revoke", {"revision": revision, "reason": "again"})
    node.refresh_from_db()
    assert node.desired_state == DesiredState.DISABLED
    joined = Client().post("/api/v1/internal/judgers/join", {"joinCode": rotated.code, "agentVersion": "1",
                                                             "runtimeSpec": "python-r1", "localSlots": 1},
                           content_type="application/json")
    assert (joined.status_code, joined.json()["error"]) == (401, "invalid_join_code")


def test_enabling_an_unchecked_node_is_refused_in_a_sentence(admin):
    node, _ = make_node(pool="python", name="fresh", desired_state=DesiredState.PENDING_VERIFICATION)
    page = admin.post(f"/admin/judgers/{node.pk}/enable", {"revision": node.revision}).content.decode()
    assert ("fresh cannot be enabled yet: it needs a fresh heartbeat and a passing self-check for its current "
            "configuration.") in page


def test_the_detail_page_shows_held_jobs_checks_and_the_timeline(admin, student, problem, node_a):
    node, identity = node_a
    submission = submit(student, problem, language="python")
    job = claim(identity)[0]
    NodeCheck.objects.create(node=node, config_revision=1, status=NodeCheck.Status.PASSED, started_at=node.created_at,
                             finished_at=node.created_at, items=[
                                 {"name": "tls", "ok": True, "detail": "verified"},
                                 {"name": "python_limits", "ok": True, "detail": "limits hit"}])
    admin.post(f"/admin/judgers/{node.pk}/edit", {"revision": node.revision, "max_slots": "3"})
    page = admin.get(f"/admin/judgers/{node.pk}").content.decode()
    assert f"Program {submission.pk}" in page and str(job.pk) in page
    assert "Connectivity: its TLS certificate" in page and "Self-check: python_limits" in page
    assert "alice" in page and "changed" in page and "Max slots: 4 → 3" in page


def test_the_node_page_says_what_a_job_is_doing_and_why_one_failed_in_the_pages_language(
        admin, student, problem, node_a):
    """The phase a node reports and a job's error code are shown in words, in Chinese too,
    in the list of recent errors as in the timeline (it showed `JUDGING`, `lease_expired`)."""
    node, identity = node_a
    submit(student, problem, language="python")
    submit(student, problem, language="python")
    running, expired = claim(identity, free_slots=2)
    JudgeJob.objects.filter(pk=running.pk).update(progress_phase="JUDGING", progress_testcase=2)
    JudgeJob.objects.filter(pk=expired.pk).update(error="lease_expired", last_node_id=node.pk,
                                                  updated_at=timezone.now())
    for language, phase, error in (("en", "Judging · case 2", f"job {expired.pk}: lease expired"),
                                   ("zh-hans", "评测中 · 第 2 个测试点", f"任务 {expired.pk}：")):
        page = admin.get(f"/admin/judgers/{node.pk}", HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert phase in page and error in page, language
        assert "JUDGING" not in page and "lease_expired" not in page, language


def test_the_timeline_says_in_words_what_changed_and_what_failed(admin, student, problem, node_a):
    node, identity = node_a
    old_group, rack = node.host_group.name, HostGroupFactory(name="rack-2", total_slots=8)
    submit(student, problem, language="python")
    submit(student, problem, language="python")
    expired, failed = claim(identity, free_slots=2)
    JudgeJob.objects.filter(pk=expired.pk).update(error="lease_expired")
    JudgeJob.objects.filter(pk=failed.pk).update(error="sandbox_start_failed")
    admin.post(f"/admin/judgers/{node.pk}/drain", {"revision": node.revision})
    node.refresh_from_db()
    admin.post(f"/admin/judgers/{node.pk}/edit", {"revision": node.revision, "host_group": rack.pk})
    page = admin.get(f"/admin/judgers/{node.pk}").content.decode()
    timeline = page[page.index('id="timeline-title"'):]
    assert "changed" in timeline and "Config state: Enabled → Draining" in timeline
    assert f"Host group: {old_group} → rack-2" in timeline
    assert "lease expired" in timeline and "infrastructure error: sandbox_start_failed" in timeline
    assert "desired_state" not in timeline and "host_group_id" not in timeline
    page = admin.get(f"/admin/judgers/{node.pk}", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    timeline = page[page.index('id="timeline-title"'):]
    assert "已更改" in timeline and "配置状态: 已启用 → 排空中" in timeline and "租约已过期" in timeline


def test_a_node_whose_host_no_longer_resolves_is_still_renamed(admin, node_a):
    """The edit form sends the base URL back with every change: the address the node already
    has is not looked up again, so a node whose machine is gone can be renamed or disabled."""
    node, _ = node_a
    JudgeNode.objects.filter(pk=node.pk).update(base_url="https://gone.invalid:8443")
    response = admin.post(f"/admin/judgers/{node.pk}/edit", {
        "revision": node.revision, "name": "node-a-old", "base_url": "https://GONE.invalid:8443/"})
    assert response.status_code == 302
    node.refresh_from_db()
    assert (node.name, node.base_url, node.desired_state) == ("node-a-old", "https://gone.invalid:8443",
                                                              DesiredState.ENABLED)
    # A new address is looked up as ever.
    moved = admin.post(f"/admin/judgers/{node.pk}/edit", {"revision": node.revision,
                                                         "base_url": "https://other.invalid:8443"})
    assert moved.status_code == 400
    node.refresh_from_db()
    assert node.base_url == "https://gone.invalid:8443"


def test_host_groups_are_created_and_their_slots_edited_with_a_revision(admin):
    admin.post("/admin/judgers/host-groups", {"name": "rack-2", "host_id": "m2", "total_slots": "8"})
    from nodes.models import JudgeHostGroup

    group = JudgeHostGroup.objects.get(name="rack-2")
    admin.post(f"/admin/judgers/host-groups/{group.pk}", {"revision": group.revision, "total_slots": "12"})
    group.refresh_from_db()
    assert group.total_slots == 12
    stale = admin.post(f"/admin/judgers/host-groups/{group.pk}", {"revision": 1, "total_slots": "4"})
    assert stale.status_code == 409
    assert "The host group was changed meanwhile — reload to see the change." in stale.content.decode()


def test_every_console_form_carries_a_csrf_token(admin, node_a):
    node, _ = node_a
    for path in ["/admin/judgers/register", "/admin/judgers/host-groups", f"/admin/judgers/{node.pk}/drain"]:
        page = admin.get(path).content.decode()
        # All but the top bar's language form, whose view needs no token (kece/urls.py).
        assert page.count('method="post"') - 1 == page.count('name="csrfmiddlewaretoken"') >= 2
        assert page.count('class="lang" action="/i18n/setlang/" method="post"') == 1


def test_the_pages_of_a_filtered_list_keep_the_filters(admin):
    group = HostGroupFactory(total_slots=4096)
    JudgeNode.objects.bulk_create([
        JudgeNode(name=f"many-{i:03}", pool="java", base_url="https://127.0.0.1:8443", host_group=group, max_slots=2)
        for i in range(60)])
    page = admin.get("/admin/judgers?pool=java").content.decode()
    assert 'href="?pool=java&amp;page=2"' in page and "many-049" in page and "many-050" not in page
    assert "many-059" in admin.get("/admin/judgers?pool=java&page=2").content.decode()


def test_a_node_page_rejudges_what_the_node_judged_and_the_rejudges_page_shows_progress(admin, student, problem):
    from datetime import timedelta

    from django.utils import timezone

    from judging.models import RejudgeOperation
    from tests.judging.helpers import claim, judged, settle

    node, identity = make_node(pool="python", name="py-bad")
    start = timezone.now()
    for _ in range(2):
        submit(student, problem, language="python")
    for job in claim(identity, free_slots=2):
        assert settle(identity, judged(job)) == "settled"
    assert "Rejudge what py-bad judged" in admin.get(f"/admin/judgers/{node.pk}").content.decode()
    since = (start - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    response = admin.post(f"/admin/judgers/{node.pk}/rejudge", {"since": since})
    assert response.status_code == 302 and response["Location"] == "/admin/judgers/rejudges"
    operation = RejudgeOperation.objects.get()
    assert (operation.total, operation.selector["nodeId"]) == (2, node.pk)
    page = admin.get("/admin/judgers/rejudges").content.decode()
    assert f'data-rejudge="{operation.pk}"' in page and "0 / 0 / 2" in page and f"Cancel #{operation.pk}" in page
    assert admin.post(f"/admin/judgers/rejudges/{operation.pk}/cancel").status_code == 302
    page = admin.get("/admin/judgers/rejudges").content.decode()
    assert '<td class="state" data-state="CANCELLED">cancelled</td>' in page and f"Cancel #{operation.pk}" not in page
    # In words of the page's language, not the stored code.
    chinese = admin.get("/admin/judgers/rejudges", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '<td class="state" data-state="CANCELLED">已取消</td>' in chinese


def test_the_rejudges_page_pages_through_every_operation_newest_first(admin):
    from django.utils import timezone

    from judging.models import RejudgeOperation, RejudgeState

    operations = RejudgeOperation.objects.bulk_create(
        [RejudgeOperation(selector={"problemId": 1000 + i}, state=RejudgeState.DONE, total=0, created_at=timezone.now())
         for i in range(55)])
    newest, oldest = max(op.pk for op in operations), min(op.pk for op in operations)
    first = admin.get("/admin/judgers/rejudges").content.decode()
    assert f'data-rejudge="{newest}"' in first and f'data-rejudge="{oldest}"' not in first
    assert 'href="?page=2"' in first and "Page 1 of 2" in first
    second = admin.get("/admin/judgers/rejudges?page=2").content.decode()
    assert f'data-rejudge="{oldest}"' in second and f'data-rejudge="{newest}"' not in second
    assert second.count("data-rejudge=") == 5


# What `str.isdigit()` takes for a number but `int()` or the database does not, and what is
# plainly not one: each is refused in words (or, in a list filter, ignored), never a 500.
NOT_NUMBERS = ["²", "١٢", "-1", "1.5", "9" * 20, "9" * 5000]


@pytest.mark.parametrize("odd", NOT_NUMBERS)
def test_a_number_field_holding_no_number_is_refused_in_words(admin, node_a, odd):
    node, _ = node_a
    listed = admin.get("/admin/judgers", {"group": odd})
    assert listed.status_code == 200 and "node-a" in listed.content.decode(), "an odd filter is no filter"
    registered = _register(admin, max_slots=odd)
    assert registered.status_code == 400
    assert "Max slots must be a whole number from 1 to 256." in registered.content.decode()
    unknown_group = _register(admin, host_group=odd)
    assert unknown_group.status_code == 400 and "Choose one of the host groups." in unknown_group.content.decode()
    edited = admin.post(f"/admin/judgers/{node.pk}/edit", {"revision": node.revision, "max_slots": odd})
    assert edited.status_code == 400 and "Max slots must be a whole number from 1 to 256." in edited.content.decode()
    stale = admin.post(f"/admin/judgers/{node.pk}/disable", {"revision": odd})
    assert stale.status_code == 409 and "reload to see the change" in stale.content.decode()

    created = admin.post("/admin/judgers/host-groups", {"name": "rack-odd", "host_id": "m9", "total_slots": odd})
    assert created.status_code == 400
    assert "Total slots must be a whole number from 1 to 4096." in created.content.decode()
    group = node.host_group
    slots = admin.post(f"/admin/judgers/host-groups/{group.pk}", {"revision": group.revision, "total_slots": odd})
    assert slots.status_code == 400 and "Total slots must be a whole number" in slots.content.decode()
    stale_group = admin.post(f"/admin/judgers/host-groups/{group.pk}", {"revision": odd, "total_slots": "4"})
    assert stale_group.status_code == 409

    node.refresh_from_db()
    group.refresh_from_db()
    assert (node.desired_state, node.max_slots, JudgeNode.objects.count()) == (DesiredState.ENABLED, 4, 1)
    assert group.total_slots != 4


@pytest.mark.parametrize("since", ["2024-02-30T10:00", "2024-13-45T00:00", "2024-01-01T25:00", "yesterday", "",
                                   "0001-01-01T00:00+05:00", "9999-12-31T23:59-05:00"])
def test_a_rejudge_from_a_time_that_does_not_exist_is_refused_in_words(admin, node_a, since):
    from judging.models import RejudgeOperation

    node, _ = node_a
    response = admin.post(f"/admin/judgers/{node.pk}/rejudge", {"since": since})
    page = response.content.decode()
    assert response.status_code == 400
    assert "is not a date and time to rejudge from; give one such as 2026-12-01 09:00 (UTC)." in page
    assert 'aria-invalid="true"' in page and "Rejudge what node-a judged" in page
    assert not RejudgeOperation.objects.exists()


def test_the_servers_own_actions_are_the_systems_in_the_readers_language(admin, node_a):
    from nodes.services import SYSTEM_ACTOR, audit

    node, _ = node_a
    audit(node=node, actor=SYSTEM_ACTOR, action="quarantine", before={}, after={"reason": "stalled"})
    for language, words in (("en", "the system"), ("zh-CN", "系统")):
        page = admin.get(f"/admin/judgers/{node.pk}", HTTP_ACCEPT_LANGUAGE=language).content.decode()
        timeline = page[page.index('id="timeline-title"'):]
        assert words in timeline and ">system<" not in timeline and " system " not in timeline.replace(words, "")


def test_the_language_switch_on_a_page_that_answered_a_form_returns_to_the_form_s_page(admin, node_a):
    """A refused form is answered at its POST-only address: switching the language there
    went back to that address with a GET, a bare 405. It returns to the page the form was on."""
    node, _ = node_a
    refused = admin.post(f"/admin/judgers/{node.pk}/rejudge", {"since": "not a time"},
                         HTTP_REFERER=f"http://testserver/admin/judgers/{node.pk}")
    assert refused.status_code == 400
    page = refused.content.decode()
    assert f'<input name="next" type="hidden" value="http://testserver/admin/judgers/{node.pk}">' in page
    switched = admin.post("/i18n/setlang/", {"language": "zh-hans", "next": f"http://testserver/admin/judgers/{node.pk}"})
    assert switched.status_code == 302 and admin.get(switched["Location"]).status_code == 200
    elsewhere = admin.post(f"/admin/judgers/{node.pk}/rejudge", {"since": "x"}, HTTP_REFERER="https://elsewhere.invalid/")
    assert '<input name="next" type="hidden" value="/">' in elsewhere.content.decode()


def test_a_checks_items_are_named_in_the_pages_language_and_its_english_details_marked_so(admin, node_a):
    """The connectivity items were their codes (tls, identity); the details are the server's
    English, marked so a screen reader reads them as English on a Chinese page."""
    node, _ = node_a
    NodeCheck.objects.create(node=node, config_revision=1, status=NodeCheck.Status.FAILED, started_at=node.created_at,
                             finished_at=node.created_at, items=[
                                 {"name": "tls", "ok": True, "detail": "HTTPS with a verified certificate"},
                                 {"name": "pool", "ok": False, "detail": "pool cpp, expected python"}])
    page = admin.get(f"/admin/judgers/{node.pk}", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "连通性：TLS 证书" in page and "连通性：评测池" in page
    assert '<td lang="en">pool cpp, expected python</td>' in page
    assert "检查失败 — 评测池" in page  # the timeline names the failed item alike
