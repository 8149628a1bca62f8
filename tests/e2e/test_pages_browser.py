"""The public pages in a real browser against the real server: the homepage panel in each
state at every width and in both languages, its refresh (paused while hidden), and a student
who submits from the browser and watches a real agent's verdict arrive."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.utils import timezone

from judging.models import Submission
from judging.services.problems import problem_import
from pools import snapshot
from tests.browser import chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.conftest import need_pool, start_server, wait_for
from tests.factories import make_node

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
WIDTHS = (1280, 1703, 390)
PASSWORD = "a-browser-password"


def person(username: str):
    # The server checks passwords with its own hashers (not the tests' fast one).
    hashed = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt(), iterations=1000)
    return get_user_model().objects.create(username=username, password=hashed)


# The WCAG contrast ratio of each element's text against the first background behind it.
CONTRAST = """(selector) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).slice(0, 4).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const behind = (el) => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length === 3 || c[3] > 0) return c; } return [255, 255, 255]; };
  return [...document.querySelectorAll(selector)].map((el) => {
    const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(behind(el))];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); });
}"""


def test_code_wider_than_a_phone_is_a_named_region_the_keyboard_reaches(quiet_server, chromium):
    from judging.services.submit import submission_submit
    from tests.factories import make_problem

    student = person("wide")
    problem = make_problem(languages=("python",))
    long_line = "print('" + "wide " * 20 + "')\nprint(2)\n"  # wider than a phone, not than a laptop
    submission = submission_submit(user=student, problem_id=problem.pk, language="python", code=long_line)
    page = new_page(chromium, width=390)
    sign_in(page, quiet_server.url, "wide", PASSWORD, f"/submissions/ALGO/{submission.pk}")
    code = page.locator("pre.output").last
    code.wait_for()
    page.wait_for_function("() => document.querySelector('pre.output:last-of-type').getAttribute('role') === 'region'")
    assert (code.get_attribute("tabindex"), code.get_attribute("aria-label")) == ("0", "Code")
    # Numbered lines, the numbers not part of the text a student copies.
    assert code.inner_text() == long_line and page.locator("pre.output .line").count() == 2
    assert page.evaluate("getComputedStyle(document.querySelector('pre.output .line'), '::before').userSelect") \
        == "none"
    for _ in range(60):  # the keyboard gets there, Tab by Tab
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.matches('pre.output')"):
            break
    assert page.evaluate("document.activeElement.matches('pre.output')")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.activeElement.scrollLeft > 0")
    screenshot(page, "submission-code-region-390-en")
    page.set_viewport_size({"width": 1280, "height": 900})  # wide enough: no longer a stop of its own
    page.wait_for_function("() => !document.querySelector('pre.output:last-of-type').hasAttribute('tabindex')")
    page.context.close()


@pytest.fixture
def quiet_server(tls, tmp_path):
    """A server whose snapshots come only from the test (no periodic work of its own), and
    that reads the one the test just wrote on every visit."""
    live = start_server(tls, tmp_path, KECE_IN_PROCESS_SCHEDULER=0, KECE_STATUS_REFRESH_MS=1000,
                        KECE_STATUS_REUSE_MS=0, KECE_SERVE_STATIC=1)
    yield live
    live.stop()


def _fleet(state: str):
    ready = {"healthy": ["cpp", "java", "python", "mysql", "arkts"], "partial": ["cpp", "java", "python", "arkts"],
             "empty": [], "stale": ["cpp", "java", "python", "mysql", "arkts"]}[state]
    for pool in ready:
        make_node(pool=pool)
    at = timezone.now() - (timedelta(minutes=10) if state == "stale" else timedelta(0))
    return snapshot.refresh_step(now=at), len(ready)


@pytest.mark.parametrize("state", ["healthy", "partial", "empty", "stale"])
def test_the_homepage_panel_is_readable_in_every_state_at_every_width(quiet_server, chromium, state):
    snap, ready = _fleet(state)
    hhmm = snap["asOf"][11:16]
    overall = {"healthy": "All available", "partial": "Partly unavailable", "empty": "Unavailable",
               "stale": "All available"}[state]
    for width in WIDTHS:
        for language in ("en", "zh-CN"):
            page = new_page(chromium, width=width, language=language)
            page.goto(quiet_server.url + "/")
            panel = page.locator("#judge-status")
            if language == "en":
                assert panel.locator(".overall").inner_text().strip() == overall
                assert f"{ready} / 5 runtimes available" in panel.inner_text()
                assert f"{ready} / 5 runtimes available" in page.locator("#topbar-status").inner_text()
                assert f"updated at {hhmm} UTC" in panel.inner_text()
                if state == "stale":
                    assert f"May be out of date, last updated {hhmm} UTC." in panel.inner_text()
            else:
                assert "评测服务状态" in panel.inner_text() and f"{ready} / 5 个运行时可用" in panel.inner_text()
            rows = panel.locator("tbody tr")
            assert rows.count() == 5
            box = rows.first.bounding_box()
            assert 36 <= box["height"] <= 48  # about 40 px rows
            if width == 390:  # the panel moves below the introduction
                assert panel.bounding_box()["y"] > page.locator(".intro").bounding_box()["y"]
            # Nothing scrolls sideways (the stale pill's longer words wrap), and greyed values
            # stay readable: at least 4.5:1 against the panel.
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (state, width, language)
            assert min(page.evaluate(CONTRAST, "#judge-status tbody td, #judge-status tbody th")) >= 4.5
            screenshot(page, f"home-{state}-{width}-{language}")
            page.context.close()


def test_the_panel_refreshes_while_visible_pauses_while_hidden_and_announces_changes(quiet_server, chromium):
    make_node(pool="python")
    snapshot.refresh_step()
    page = new_page(chromium)
    page.goto(quiet_server.url + "/")
    assert "1 / 5 runtimes available" in page.locator("#judge-status").inner_text()
    # A change becomes visible without reloading, and is announced once.
    make_node(pool="cpp")
    snapshot.refresh_step()
    with page.expect_request(re.compile(r"/status/panel$"), timeout=5000):
        pass
    page.wait_for_function("() => document.querySelector('#topbar-status').innerText.includes('2 / 5')", timeout=5000)
    assert "2 / 5 runtimes available" in page.locator("#judge-status").inner_text()
    page.wait_for_function(
        "() => document.querySelector('#judge-status-announce').textContent.includes('2 / 5 runtimes available')",
        timeout=5000)
    # Hidden: no refresh for several periods.
    requests = []
    page.on("request", lambda request: requests.append(request.url) if request.url.endswith("/status/panel") else None)
    page.evaluate("""() => {
        Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
        document.dispatchEvent(new Event('visibilitychange'));
    }""")
    page.wait_for_timeout(3500)  # three and a half refresh periods of 1 s
    assert requests == []
    with page.expect_request(re.compile(r"/status/panel$"), timeout=3000):
        page.evaluate("""() => {
            Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'visible'});
            document.dispatchEvent(new Event('visibilitychange'));
        }""")
    page.context.close()


def test_a_student_submits_from_the_browser_and_sees_the_verdict_arrive(agents, chromium):
    need_pool("python")
    node = agents.register("python", slots=1)
    agents.start(node, slots=1)
    agents.enable(node)
    problem, _ = problem_import(SAMPLES / "aplusb")
    person("alice")
    person("bob")
    base = agents.server.url
    page = new_page(chromium)
    sign_in(page, base, "alice", PASSWORD, f"/problems/{problem.pk}")
    wait_for(lambda: snapshot.read(now=timezone.now())["pools"][2]["status"] != "UNAVAILABLE", 30,
             "the server's snapshot shows the python judge")
    page.reload()
    page.get_by_label("Language", exact=True).select_option("python")
    assert "Python — ready" in page.locator("#language-status").inner_text()
    page.get_by_label("Code", exact=True).fill((SAMPLES / "aplusb" / "solutions" / "ac.py").read_text())
    screenshot(page, "problem-1280-en")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_url(re.compile(r"/submissions/ALGO/\d+$"))
    page.evaluate("window.__notReloaded = true")
    page.locator(".status-line", has_text="Accepted").wait_for(timeout=60000)
    assert page.evaluate("window.__notReloaded === true")  # it arrived without a reload
    assert "100 / 100" in page.locator("#submission-live").inner_text()
    assert page.locator("#submission-live tbody tr").count() == 5
    # The record below came with the last poll: who judged it, no attempt still "being judged".
    page.locator("#submission-record .provenance").wait_for(timeout=10000)
    assert "Being judged now" not in page.locator("#submission-record").inner_text()
    screenshot(page, "submission-1280-en")
    submission = Submission.objects.get(user__username="alice")
    url = page.url
    page.set_viewport_size({"width": 390, "height": 900})
    screenshot(page, "submission-390-en")
    page.set_viewport_size({"width": 1280, "height": 900})

    # From the submission's page back to its problem with its code, changed and sent again.
    page.get_by_role("link", name="Edit this code and submit it again").click()
    page.wait_for_url(re.compile(rf"/problems/{problem.pk}\?from={submission.pk}$"))
    editor = page.get_by_label("Code", exact=True)
    assert editor.input_value() == submission.code.replace("\r\n", "\n")  # a form sends lines with CRLF
    editor.fill((SAMPLES / "aplusb" / "solutions" / "wa.py").read_text())
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_url(re.compile(r"/submissions/ALGO/\d+$"))
    page.locator(".status-line", has_text="Wrong answer").wait_for(timeout=60000)
    assert "its output on test case 1 is not the expected output" in page.locator("#submission-live .advice").inner_text()
    screenshot(page, "submission-wrong-answer-1280-en")
    page.context.close()

    other = new_page(chromium)
    sign_in(other, base, "bob", PASSWORD, "/submissions")
    response = other.goto(url)
    assert response.status == 404 and "Not found" in other.content()
    assert str(submission.pk) in url
    other.context.close()


def test_a_refused_submit_on_a_phone_opens_at_its_reasons(quiet_server, chromium):
    """Below the statement on a 390 px screen, the reasons would be a screen or more down
    from where the answer opens: they are focused, so in view and read out."""
    problem, _ = problem_import(SAMPLES / "prefix-sums")
    person("carol")
    page = new_page(chromium, width=390, language="zh-CN")
    sign_in(page, quiet_server.url, "carol", PASSWORD, f"/problems/{problem.pk}", language="zh-CN")
    page.get_by_label("代码", exact=True).fill("x" * (300 * 1024))  # over the 256 KiB a submission may hold
    page.get_by_role("button", name="提交", exact=True).click()
    alert = page.locator("#submit-refused")
    alert.wait_for()
    assert page.evaluate("document.activeElement.id") == "submit-refused"
    box, height = alert.bounding_box(), page.viewport_size["height"]
    assert 0 <= box["y"] < height, (box, height)  # in view, not a screen further down
    assert page.evaluate("window.scrollY") > 0
    screenshot(page, "problem-refused-390-zh")
    page.context.close()


def test_tab_indents_the_code_and_a_reload_keeps_what_was_typed(quiet_server, chromium):
    """Tab in the code indents, as in any editor: it moved the focus to Submit, and the next
    key sent half-written code (in an OI exam, over a good answer). Esc, then Tab, leaves.
    What was typed, and its language, survive a reload and the language switch."""
    problem, _ = problem_import(SAMPLES / "prefix-sums")
    person("dora")
    page = new_page(chromium)
    sign_in(page, quiet_server.url, "dora", PASSWORD, f"/problems/{problem.pk}")
    code = page.get_by_label("Code", exact=True)
    code.click()
    page.keyboard.type("def main():")
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    page.keyboard.type("pass")
    assert code.input_value() == "def main():\n    pass"
    assert page.evaluate("() => document.activeElement.id") == "id_code"
    page.keyboard.press("Shift+Tab")
    assert code.input_value() == "def main():\npass"
    page.keyboard.press("Tab")
    page.get_by_label("Language", exact=True).select_option("python")
    code.focus()
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") != "id_code"  # the keyboard is not trapped
    assert page.evaluate("() => document.activeElement.tagName") != "BODY"

    page.reload()
    assert code.input_value() == "def main():\n    pass"
    assert page.get_by_label("Language", exact=True).input_value() == "python"
    assert "has not been submitted" in page.locator("#draft-note").inner_text()
    page.get_by_role("button", name="Switch").click()  # the site's language, on the same page
    page.wait_for_url(f"{quiet_server.url}/problems/{problem.pk}")
    assert page.get_by_label("Code", exact=True).input_value() == "def main():\n    pass"
    screenshot(page, "problem-draft-kept-1280-en")
    page.context.close()


def test_back_then_submit_again_is_the_same_submission(quiet_server, chromium):
    """A student submits, goes Back and presses Submit on the same code: one submission, and
    the page lands on it (a second was made, in an ACM exam another attempt). Changed code
    is a new submission."""
    from judging.models import Submission

    problem, _ = problem_import(SAMPLES / "prefix-sums")
    person("erin")
    page = new_page(chromium)
    sign_in(page, quiet_server.url, "erin", PASSWORD, f"/problems/{problem.pk}")
    page.get_by_label("Language", exact=True).select_option("python")
    page.get_by_label("Code", exact=True).fill("print(1)\n")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/submissions/ALGO/\d+$"))
    first = page.url
    page.go_back()
    page.wait_for_url(f"{quiet_server.url}/problems/{problem.pk}")
    assert page.get_by_label("Code", exact=True).input_value() == "print(1)\n"
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/submissions/ALGO/\d+$"))
    assert page.url == first and Submission.objects.count() == 1
    page.go_back()
    page.wait_for_url(f"{quiet_server.url}/problems/{problem.pk}")
    page.get_by_label("Code", exact=True).fill("print(2)\n")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/submissions/ALGO/\d+$"))
    assert page.url != first and Submission.objects.count() == 2
    page.context.close()
