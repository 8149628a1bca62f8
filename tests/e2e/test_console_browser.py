"""The operators' console in a real browser against the real server and a real python agent:
an admin registers a node through the form, starts the agent with the join code the page
shows once, watches it join, checks it, enables it, sees a submission run on it and drains
it — all without reloading; a teacher gets 403, an anonymous visitor the login page, and
the Chinese page has Chinese labels."""

import concurrent.futures
import os
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from judging.models import Submission
from judging.services.problems import problem_import
from judging.services.submit import submission_submit
from nodes.models import DesiredState, JudgeNode
from tests.agents import private_dir
from tests.browser import chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.conftest import Agents, need_pool, start_server, wait_for
from tests.e2e.test_pages_browser import PASSWORD, person
from tests.factories import HostGroupFactory
from tests.live import free_port

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
# A slow solution (a second per case), so that the admin sees it running.
SLOW = "import time\ntime.sleep(1)\n" + (SAMPLES / "aplusb" / "solutions" / "ac.py").read_text()


@pytest.fixture
def console_server(tls, tmp_path):
    # The test-only loopback allowance is not the default: the node's address is approved
    # explicitly, as an operator would.
    live = start_server(tls, tmp_path, KECE_PROBE_ALLOWED_NETWORKS="127.0.0.0/8")
    yield live
    live.stop()


@pytest.fixture
def fleet(console_server, tls, settings):
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    agents = Agents(console_server, tls)
    yield agents
    agents.stop()


def admin_person(username="alice"):
    user = person(username)
    user.user_permissions.add(Permission.objects.get(codename="manage_judgers", content_type__app_label="nodes"))
    return user


def _wait_text(page, selector: str, text: str, timeout: float = 60000, explain=None):
    """Wait for `text` in `selector`; on a timeout, say what the page shows instead and what
    `explain()` tells of the system behind it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.locator(selector, has_text=text).first.wait_for(timeout=timeout)
    except PlaywrightTimeout:
        shown = page.locator(selector).all_inner_texts()
        raise AssertionError(f"{selector} never showed {text!r}: it shows {shown!r}"
                             + (f"\n{explain()}" if explain else "")) from None


def _explain_jobs(agent, server):
    from judging.models import JudgeJob

    jobs = list(JudgeJob.objects.values_list("pk", "state", "node_id", "attempts"))
    log = server.log_path.read_text(errors="replace")[-3000:] if server.log_path else ""
    return f"jobs (id, state, node, attempts): {jobs}\nagent log:\n{agent.logs()[-3000:]}\nserver log:\n{log}"


def test_an_admin_registers_watches_the_node_join_checks_enables_and_drains_it(fleet, chromium):
    need_pool("python")
    admin_person()
    group = HostGroupFactory(name="rack-1", total_slots=8)
    base = fleet.server.url
    port = free_port()
    page = new_page(chromium)
    sign_in(page, base, "alice", PASSWORD, "/admin/judgers/register")

    page.get_by_label("Name", exact=True).fill("python-1")
    page.get_by_label("Pool", exact=True).select_option("python")
    page.get_by_label("Base URL", exact=True).fill(f"https://127.0.0.1:{port}")
    page.get_by_label("Host group", exact=True).select_option(str(group.pk))
    page.get_by_label("Max slots", exact=True).fill("1")
    page.get_by_role("button", name="Register", exact=True).click()
    page.wait_for_url(re.compile(r"/admin/judgers/\d+/join$"))
    code = page.locator("#join-code").inner_text().strip()
    assert "JUDGE_POOL=python" in page.locator("#agent-env").inner_text()
    _wait_text(page, "#live-status", "Live", 10000)
    screenshot(page, "console-join-waiting-1280-en")
    page.evaluate("window.__notReloaded = true")

    # The agent starts with the code the page showed, as an operator would paste it.
    node = JudgeNode.objects.get(name="python-1")
    secrets = private_dir("kece-e2e-cred-", 0o700)
    fleet.folders.append(secrets)
    credential = secrets / "credential"
    credential.write_text(code + "\n")
    os.chmod(credential, 0o600)
    node.port, node.credential_file = port, credential
    agent = fleet.start(node, slots=1, wait_joined=False)
    _wait_text(page, "#join-progress [data-step=join]", "Joined: agent")

    page.get_by_role("button", name="Run checks", exact=True).click()
    page.wait_for_url(re.compile(r"/admin/judgers/\d+/join$"))
    _wait_text(page, "#join-progress [data-step=self-check]", "Self-check passed", 90000)
    assert "Connectivity ok" in page.locator("#join-progress").inner_text()
    assert page.locator("#join-progress .check-items tbody tr").count() >= 5
    screenshot(page, "console-join-checked-1280-en")
    page.set_viewport_size({"width": 390, "height": 900})
    screenshot(page, "console-join-checked-390-en")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.get_by_role("button", name="Enable", exact=True).click()
    page.wait_for_url(re.compile(r"/admin/judgers/\d+$"))
    assert "Enabled" in page.locator("#node-live .config").inner_text()

    page.goto(base + "/admin/judgers")
    _wait_text(page, "#live-status", "Live", 10000)
    row = page.locator("tr[data-node='python-1']")
    _wait_text(page, "tr[data-node='python-1'] .observed", "Ready", 30000)
    page.evaluate("window.__notReloaded = true")
    problem, _ = problem_import(SAMPLES / "aplusb")
    submission = submission_submit(user=person("bob"), problem_id=problem.pk, language="python", code=SLOW)
    _wait_text(page, "tr[data-node='python-1'] .running", "1 / 1", 30000,
               explain=lambda: _explain_jobs(agent, fleet.server))
    assert "1 / 1" in page.locator("li[data-pool='python'] .running-capacity").inner_text()
    screenshot(page, "console-fleet-running-1280-en")
    page.set_viewport_size({"width": 390, "height": 900})
    screenshot(page, "console-fleet-running-390-en")
    # The nodes table scrolls on its own; the page itself does not scroll sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1280, "height": 900})
    wait_for(lambda: Submission.objects.get(pk=submission.pk).verdict == "AC", 60, "the slow submission judged",
             agent)
    _wait_text(page, "tr[data-node='python-1'] .running", "0 / 1", 30000)
    assert page.evaluate("window.__notReloaded === true")  # all of it arrived without a reload

    row.locator("summary").click()
    row.get_by_role("link", name="Drain", exact=True).click()
    assert "Draining python-1 leaves Python with no ready node." in page.locator(".impact").inner_text()
    screenshot(page, "console-confirm-drain-1280-en")
    page.get_by_role("button", name="Drain", exact=True).click()
    page.wait_for_url(re.compile(r"/admin/judgers/\d+$"))
    assert "Draining" in page.locator("#node-live .observed").inner_text()
    node.refresh_from_db()
    assert node.desired_state == DesiredState.DRAINING
    screenshot(page, "console-node-drained-1280-en")
    page.set_viewport_size({"width": 390, "height": 900})
    screenshot(page, "console-node-drained-390-en")

    # Coming back to the join page never shows the code again.
    page.goto(f"{base}/admin/judgers/{node.pk}/join")
    assert code not in page.content()
    page.context.close()

    chinese = new_page(chromium, language="zh-CN")
    chinese.goto(f"{base}/accounts/login/?next=/admin/judgers")
    chinese.get_by_label("用户名").fill("alice")
    chinese.get_by_label("密码").fill(PASSWORD)
    chinese.get_by_role("button", name="登录").click()
    chinese.wait_for_url(f"{base}/admin/judgers")
    text = chinese.locator("main").inner_text()
    assert "评测节点" in text and "观测状态" in text and "排空中" in text
    screenshot(chinese, "console-fleet-1280-zh")
    chinese.set_viewport_size({"width": 390, "height": 900})
    screenshot(chinese, "console-fleet-390-zh")
    chinese.context.close()


def test_a_teacher_gets_403_and_an_anonymous_visitor_is_sent_to_sign_in(console_server, chromium):
    base = console_server.url
    teacher = person("tess")
    teacher.is_staff = True
    teacher.save()
    page = new_page(chromium)
    response = page.goto(base + "/admin/judgers")
    assert page.url.startswith(base + "/accounts/login/?next=/admin/judgers") and response.status == 200
    sign_in(page, base, "tess", PASSWORD, "/problems")
    response = page.goto(base + "/admin/judgers")
    assert response.status == 403 and "Your account may not open this page." in page.content()
    assert page.locator("#nav-judgers").count() == 0
    screenshot(page, "console-403-1280-en")
    page.context.close()


@pytest.mark.parametrize("language, width", [("en", 1280), ("zh-CN", 390)])
def test_a_nodes_timeline_reads_as_sentences(console_server, chromium, language, width):
    from django.utils import timezone

    from nodes.models import DesiredState
    from nodes.services import node_update
    from tests.factories import make_node

    admin = admin_person()
    node, _identity = make_node(pool="python", name="py-8")
    node_update(node_id=node.pk, revision=None, changes={"desired_state": DesiredState.DRAINING, "max_slots": 2},
                actor=admin, now=timezone.now())
    page = new_page(chromium, width=width, language=language)
    sign_in(page, console_server.url, "alice", PASSWORD, f"/admin/judgers/{node.pk}", language=language)
    timeline = page.locator("ol.timeline")
    words = {"en": ("changed", "Config state: Enabled → Draining", "Max slots: 4 → 2"),
             "zh-CN": ("已更改", "配置状态: 已启用 → 排空中", "最大槽位: 4 → 2")}[language]
    for said in words:
        assert said in timeline.inner_text()
    screenshot(page, f"console-node-timeline-{width}-{language}")
    page.context.close()


@pytest.mark.parametrize("language, width", [("en", 1280), ("zh-CN", 390)])
def test_a_rejudge_time_that_does_not_exist_is_refused_beside_the_field(console_server, chromium, language, width):
    """A browser without a date-time picker shows the field as a text box; what is typed
    there may be no moment at all."""
    from tests.factories import make_node

    admin_person()
    node, _identity = make_node(pool="python", name="py-7")
    page = new_page(chromium, width=width, language=language)
    sign_in(page, console_server.url, "alice", PASSWORD, f"/admin/judgers/{node.pk}", language=language)
    field = page.locator("#rejudge-since")
    field.evaluate("input => input.type = 'text'")
    field.fill("2026-02-30T10:00")
    with page.expect_navigation():
        field.press("Enter")
    alert = page.get_by_role("alert")
    words = {"en": "is not a date and time to rejudge from", "zh-CN": "不是可以作为重判起点的日期和时间"}[language]
    assert words in alert.inner_text()
    assert field.get_attribute("aria-invalid") == "true"
    screenshot(page, f"console-rejudge-refused-{width}-{language}")
    page.context.close()


@pytest.mark.parametrize("language, width", [("en", 1280), ("zh-CN", 390)])
def test_an_admin_finds_failed_work_says_why_and_requeues_it_after_the_impact(console_server, chromium, language,
                                                                              width, settings):
    from judging.models import JobState, JudgeJob, RejudgeOperation
    from tests.factories import UserFactory, make_node, make_problem
    from tests.judging.helpers import claim, infra_error, settle

    admin_person()
    _node, identity = make_node(pool="python", name="py-flaky")
    problem = make_problem(languages=("python",))
    failed = submission_submit(user=UserFactory(), problem_id=problem.pk, language="python", code="print(1)")
    job = JudgeJob.objects.get(pk=failed.current_judge_job_id)
    settings.KECE_QUARANTINE_INFRA_ERRORS = 1000
    while job.state != JobState.FAILED:
        [job] = claim(identity)
        settle(identity, infra_error(job, error="sandbox_crashed"))
        job.refresh_from_db()
        JudgeJob.objects.filter(pk=job.pk, state=JobState.QUEUED).update(available_at=job.created_at,
                                                                         claim_key=job.created_at, avoid_node_id=None)
    page = new_page(chromium, width=width, language=language)
    sign_in(page, console_server.url, "alice", PASSWORD, "/admin/judgers/failed", language=language)
    row = page.locator(f"tr[data-job='{job.pk}']")
    assert "sandbox_crashed" in row.inner_text()
    screenshot(page, f"console-failed-{width}-{language}")
    row.get_by_role("checkbox").check()
    with page.expect_navigation():
        page.get_by_role("button", name={"en": "Re-queue the chosen jobs…", "zh-CN": "重新排队所选任务…"}[language]).click()
    impact = {"en": "will be judged again as a bulk rejudge", "zh-CN": "将作为批量重判再次评测"}[language]
    assert impact in page.locator(".impact").inner_text()
    screenshot(page, f"console-failed-confirm-{width}-{language}")
    assert RejudgeOperation.objects.count() == 0
    with page.expect_navigation():
        page.get_by_role("button", name={"en": "Re-queue", "zh-CN": "重新排队"}[language], exact=True).click()
    assert page.url.endswith("/admin/judgers/rejudges")
    assert list(RejudgeOperation.objects.get().items.values_list("submission_id", flat=True)) == [failed.pk]
    page.context.close()


@pytest.mark.redis  # the test's word reaches the server's sockets through Redis
def test_a_console_that_hears_nothing_stops_calling_itself_live_until_a_message_comes_through(tls, tmp_path,
                                                                                               chromium):
    """Nothing publishes (no scheduler runs the live step): the page takes its socket for deaf
    after `silentAfterMs`, says it is reconnecting, and stays so on the new socket until a
    message from the publisher's side comes through the whole way."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from nodes.console import live

    server = start_server(tls, tmp_path, KECE_IN_PROCESS_SCHEDULER=0, KECE_CONSOLE_PUBLISH_MS=300)
    try:
        admin_person()
        page = new_page(chromium)
        sockets, greetings = [], []

        def opened(socket):
            sockets.append(socket)
            socket.on("framereceived", lambda payload: greetings.append(socket) if '"live"' in str(payload) else None)

        page.on("websocket", opened)
        sign_in(page, server.url, "alice", PASSWORD, "/admin/judgers")
        _wait_text(page, "#live-status", "Live", 10000)
        _wait_text(page, "#live-status", "Reconnecting", 10000)  # ten intervals without a word
        # Playwright delivers the page's socket events while it is waiting on the page.
        wait_for(lambda: page.wait_for_timeout(100) or len(set(greetings)) >= 2, 20, "a second socket greeted")
        assert "Reconnecting" in page.locator("#live-status").inner_text()  # open, but not yet heard through
        screenshot(page, "console-silent-reconnecting-1280-en")

        def told_alive() -> bool:
            # From a thread of its own: Playwright's loop runs in this one.
            send = async_to_sync(get_channel_layer().group_send)
            with concurrent.futures.ThreadPoolExecutor(1) as publisher:
                publisher.submit(send, live.GROUP, {"type": "fleet.alive"}).result()
            return "Live" in page.locator("#live-status").inner_text()

        wait_for(told_alive, 30, "the page live again once the server's word came through")
    finally:
        server.stop()


def test_the_live_list_waits_while_the_operator_is_in_a_menu_and_catches_up_after(console_server, chromium):
    """A keyboard operator in a node's Actions menu keeps the menu and the focus while the
    fleet changes (each change re-renders the list); once they leave it, the list catches up."""
    from nodes.models import JudgeNode
    from tests.factories import make_node

    admin_person()
    node, _identity = make_node(pool="python", name="py-menu")
    page = new_page(chromium)
    sign_in(page, console_server.url, "alice", PASSWORD, "/admin/judgers")
    _wait_text(page, "#live-status", "Live", 10000)
    page.evaluate("""() => { window.__asked = 0; window.__swapped = 0;
        document.body.addEventListener("htmx:beforeRequest", (e) => { if (e.detail.elt.id === "fleet") window.__asked++; });
        document.body.addEventListener("htmx:afterSwap", (e) => { if (e.detail.target.id === "fleet") window.__swapped++; }); }""")
    page.locator("#fleet summary", has_text="Actions").first.focus()
    page.keyboard.press("Enter")  # opens the menu
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Run checks"
    # Counted from here: before the menu opened, a refresh (the page's first news of the
    # node, a timer) may rightly have swapped the list.
    page.evaluate("window.__asked = 0; window.__swapped = 0")

    JudgeNode.objects.filter(pk=node.pk).update(max_slots=3)
    page.evaluate("htmx.trigger(document.body, 'judgers-changed')")
    page.wait_for_function("() => window.__asked >= 1")
    assert page.evaluate("window.__swapped") == 0
    assert page.evaluate("document.querySelector('#fleet details').open")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Run checks"
    screenshot(page, "console-menu-kept-open-1280-en")

    page.locator("#fleet summary", has_text="Actions").first.click()  # closes the menu
    page.evaluate("document.activeElement.blur()")
    page.wait_for_function("() => window.__swapped >= 1")
    assert "0 / 3" in page.locator("#fleet").inner_text()
    page.context.close()


def test_a_refused_registration_puts_the_keyboard_on_the_first_field_refused(console_server, chromium):
    admin_person()
    HostGroupFactory(name="rack-9", total_slots=4)
    page = new_page(chromium)
    sign_in(page, console_server.url, "alice", PASSWORD, "/admin/judgers/register")
    page.get_by_label("Name", exact=True).fill("python-9")
    page.get_by_label("Base URL", exact=True).fill("https://127.0.0.1:22")  # not an approved port
    page.get_by_role("button", name="Register", exact=True).click()
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'r-url'")
    described = page.evaluate("document.activeElement.getAttribute('aria-describedby')")
    assert "Port 22 is not an approved port" in page.locator(f"#{described.split()[0]}").inner_text()
    page.context.close()
