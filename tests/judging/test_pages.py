"""The student's pages: problems, the submit form, a submission's live status, my submissions.
They go through the same services as the user API."""

import re

import pytest
from django.core.management import call_command
from django.test import Client

from judging.models import DbSubmission, JudgeJob, Problem, Submission
from judging.services.problems import problem_import
from pools import snapshot
from tests.api.helpers import make_admin
from tests.factories import UserFactory, make_node, make_practice, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, student):
    client.force_login(student)
    return client


def test_the_problem_list_links_every_published_problem(client, problem):
    page = client.get("/problems").content.decode()
    assert f'href="/problems/{problem.pk}"' in page and problem.title in page


def test_a_problem_page_renders_its_statement_safely(client, tmp_path):
    (tmp_path / "problem.json").write_text(
        '{"slug": "safe", "title": "Safe", "kind": "ALGO", "timeLimitMs": 1500, "memoryLimitMb": 128,'
        ' "languages": ["python"], "cases": [{"input": "1.in", "output": "1.out", "weight": 100}],'
        ' "samples": [{"input": "1.in", "output": "1.out"}]}')
    (tmp_path / "1.in").write_text("1 2\n")
    (tmp_path / "1.out").write_text("3\n")
    (tmp_path / "statement.md").write_text(
        "# Safe\n\nAdd **two** numbers.\n\n<script>alert('x')</script>\n\n[click](javascript:alert(1))\n"
        "\n<img src=x onerror=alert(1)>\n")
    problem, _ = problem_import(tmp_path)
    page = client.get(f"/problems/{problem.pk}").content.decode()
    assert "<strong>two</strong>" in page
    assert "<script>alert" not in page and 'href="javascript:' not in page and "onerror=" not in page.replace(
        "&lt;img src=x onerror=alert(1)&gt;", "")
    assert "Time limit: 1500 ms" in page and "Memory limit: 128 MiB" in page
    assert page.count("<h1") == 1  # the statement's own title heading is not repeated
    assert "Sample 1" in page and "1 2" in page


def test_an_unknown_problem_is_a_404_page(client):
    response = client.get("/problems/999999")
    assert response.status_code == 404 and "Not found" in response.content.decode()


def test_the_submit_form_offers_the_problem_languages_with_their_live_status(signed_in, student):
    problem = make_problem(languages=("python", "java"))
    make_node(pool="python")
    snapshot.refresh_step()
    page = signed_in.get(f"/problems/{problem.pk}").content.decode()
    options = re.findall(r'<option value="(\w+)" data-status="([^"]*)"', page)
    assert [code for code, _ in options] == ["python", "java"]
    status = dict(options)
    assert status["python"] == "Python — ready"
    assert status["java"] == "Java — no judge is available right now; your submission will wait until one is"
    assert '<label for="id_language">Language</label>' in page and '<label for="id_code">Code</label>' in page


def test_submitting_from_the_page_creates_the_submission_and_its_job(signed_in, student, problem):
    response = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(42)"})
    submission = Submission.objects.get(user=student)
    assert response.status_code == 302 and response["Location"] == f"/submissions/ALGO/{submission.pk}"
    job = JudgeJob.objects.get(pk=submission.current_judge_job_id)
    assert (job.pool, job.state, submission.code) == ("python", "QUEUED", "print(42)")


@pytest.mark.parametrize("language, code, message", [
    ("python", "   ", "Write or paste your code first."),
    ("cobol", "print(1)", "Choose one of the languages this problem accepts."),
])
def test_a_refused_submission_keeps_the_code_in_the_form_and_writes_nothing(signed_in, problem, language, code,
                                                                            message):
    response = signed_in.post(f"/problems/{problem.pk}", {"language": language, "code": code})
    page = response.content.decode()
    assert response.status_code == 400 and message in page
    assert f">{code}</textarea>" in page
    assert not Submission.objects.exists() and not JudgeJob.objects.exists()


def test_an_anonymous_visitor_is_sent_to_sign_in_and_nothing_is_written(client, problem):
    page = client.get(f"/problems/{problem.pk}").content.decode()
    assert "Sign in to submit." in page and "<textarea" not in page
    response = client.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not Submission.objects.exists()


def test_a_submission_page_follows_the_judging_to_the_verdict(signed_in, student, problem):
    node, identity = make_node(pool="python")
    submission = submit(student, problem)
    url = f"/submissions/ALGO/{submission.pk}"
    live = signed_in.get(url + "/live").content.decode()
    assert "Waiting for a judge" in live and "hx-trigger=" in live
    [job] = claim(identity)
    JudgeJob.objects.filter(pk=job.pk).update(progress_phase="JUDGING", progress_testcase=2)
    judging = signed_in.get(url + "/live").content.decode()
    # Shown case by case; told once (not on each case, a renewal apart on a long problem).
    assert "Judging case 2 of 2" in judging and 'data-announce="Judging"' in judging
    assert "Being judged now" in signed_in.get(url).content.decode()  # the record, as the page was opened
    settle(identity, judged(job, verdict="WA", passing=[1]))
    answer = signed_in.get(url + "/live").content.decode()
    live, record = answer.split('<div id="submission-record" hx-swap-oob="true">')
    assert "Wrong answer" in live and "50 / 100" in live
    assert 'data-announce="Wrong answer, 50 / 100"' in live  # the verdict told with its score
    assert "hx-trigger=" not in live  # a final verdict stops the polling
    assert len(re.findall(r"<tr>\s*<td class=\"num\">\d", live)) == 2  # one row per case
    # The last poll replaces the record below too: who judged it, and no attempt "being judged".
    assert "Who judged it" in record and "Being judged now" not in record


@pytest.mark.parametrize("verdict, said", [
    ("WA", "its output on test case 2 is not the expected output"),
    ("TLE", "past the time limit of {timeLimitMs} ms on test case 2"),
    ("MLE", "more than the memory limit of {memoryLimitMb} MiB on test case 2"),
    ("OLE", "more than the output limit of {output} on test case 2"),
    ("RE", "stopped with an error on test case 2: an exception not caught"),
])
def test_a_failed_verdict_says_which_case_failed_what_limit_and_what_to_look_at(signed_in, student, verdict, said):
    _, identity = make_node(pool="python")
    problem = make_problem(languages=("python",), cases=3)
    submission = submit(student, problem)
    [job] = claim(identity)
    settle(identity, judged(job, verdict=verdict, passing=[1]))  # cases 2 and 3 fail: 2 is the first
    live = signed_in.get(f"/submissions/ALGO/{submission.pk}/live").content.decode()
    [advice] = re.findall(r'<p class="advice">(.*?)</p>', live, re.S)
    limits = job.snapshot["limits"]
    kb = limits["outputLimitKb"]
    output = f"{kb // 1024} MiB" if kb % 1024 == 0 else f"{kb} KiB"  # 64 MiB, not 65536 KiB
    assert said.format(**limits, output=output) in advice.replace("&amp;", "&")
    chinese = signed_in.get(f"/submissions/ALGO/{submission.pk}/live", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "测试点 2" in chinese.content.decode()


def test_a_thousand_lines_of_code_keep_their_column_under_four_digit_numbers(signed_in, student, problem):
    submission = submit(student, problem, code="pass\n" * 1000)
    page = signed_in.get(f"/submissions/ALGO/{submission.pk}").content.decode()
    assert '<pre class="output code-lines digits-4">' in page and page.count('<span class="line">') == 1000


def test_a_system_error_tells_the_student_it_is_not_their_code(signed_in, student, problem):
    _, identity = make_node(pool="python")
    submission = submit(student, problem)
    [job] = claim(identity)
    JudgeJob.objects.filter(pk=job.pk).update(state="FAILED")  # its last attempt failed on the judges' side
    live = signed_in.get(f"/submissions/ALGO/{submission.pk}/live").content.decode()
    assert "System error" in live and "your code is not at fault" in live


def test_an_accepted_program_and_a_failed_query_get_their_own_words(signed_in, student, problem):
    _, identity = make_node(pool="python")
    accepted = submit(student, problem)
    [job] = claim(identity)
    settle(identity, judged(job))
    assert 'class="advice"' not in signed_in.get(f"/submissions/ALGO/{accepted.pk}/live").content.decode()
    _, sql_node = make_node(pool="mysql", name="mysql-1")
    query = submit(student, make_problem(kind="SQL"), language="mysql")
    [job] = claim(sql_node)
    settle(identity=sql_node, request=judged(job, verdict="RE"))
    live = signed_in.get(f"/submissions/SQL/{query.pk}/live").content.decode()
    assert "Your query failed on test case 1: the database refused to run it" in live


def test_a_compile_error_shows_no_time_or_memory_it_never_used(signed_in, student, problem):
    from dataclasses import replace

    _, identity = make_node(pool="python")
    compiled = submit(student, problem)
    [job] = claim(identity)
    settle(identity, replace(judged(job, verdict="CE", score=0, passing=[]), cases=(), time_ms=0, memory_kb=0))
    live = signed_in.get(f"/submissions/ALGO/{compiled.pk}/live").content.decode()
    assert re.search(r'<dd class="time">—</dd>\s*<dt>[^<]*</dt><dd class="memory">—</dd>', live), live
    page = signed_in.get(f"/submissions/ALGO/{compiled.pk}").content.decode()
    assert f"<h1>Submission: Program {compiled.pk}</h1>" in page  # as the lists name it
    assert f">Program {compiled.pk}</a>" in signed_in.get("/submissions").content.decode()
    lowered = signed_in.get(f"/submissions/algo/{compiled.pk}")
    assert (lowered.status_code, lowered["Location"]) == (301, f"/submissions/ALGO/{compiled.pk}")
    assert signed_in.get(f"/submissions/nope/{compiled.pk}").status_code == 404
    assert '<dd class="submitted-for">practice on your own</dd>' in page
    ran = submit(student, problem)
    [job] = claim(identity)
    settle(identity, judged(job))  # 10 ms, 1024 KiB a case
    live = signed_in.get(f"/submissions/ALGO/{ran.pk}/live").content.decode()
    assert '<dd class="time">10 ms</dd>' in live and '<dd class="memory">1024 KiB</dd>' in live


def test_a_submission_waiting_for_a_runtime_without_judges_says_so(signed_in, student, problem):
    submission = submit(student, problem, language="cpp")
    live = signed_in.get(f"/submissions/ALGO/{submission.pk}/live").content.decode()
    assert "no C++ judge is available right now" in live


def test_only_the_owner_and_admins_see_a_submission(client, student, problem):
    submission = submit(student, problem)
    url = f"/submissions/ALGO/{submission.pk}"
    assert client.get(url).status_code == 302  # anonymous: sign in first
    client.force_login(UserFactory(username="someone-else"))
    assert client.get(url).status_code == 404 and client.get(url + "/live").status_code == 404
    client.force_login(make_admin())
    assert client.get(url).status_code == 200
    client.force_login(student)
    page = client.get(url).content.decode()
    assert "print(1)" in page


def test_my_submissions_lists_code_and_sql_submissions_with_colliding_ids(signed_in, student, problem):
    sql_problem = make_problem(kind="SQL")
    code = submit(student, problem)
    query = submit(student, sql_problem, language="mysql", code="SELECT x FROM t;")
    # Two tables: make the same numeric id name two submissions.
    JudgeJob.objects.filter(submission_type="ALGO", submission_id=code.pk).update(submission_id=query.pk)
    Submission.objects.filter(pk=code.pk).update(id=query.pk)
    code = Submission.objects.get(pk=query.pk)
    submit(UserFactory(username="neighbour"), problem)
    page = signed_in.get("/submissions").content.decode()
    assert f'href="/submissions/ALGO/{code.pk}"' in page and f'href="/submissions/SQL/{query.pk}"' in page
    assert page.count('href="/submissions/') == 2
    assert DbSubmission.objects.count() == 1


def test_pages_are_in_chinese_for_a_chinese_browser(client, problem):
    snapshot.refresh_step()
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()
    assert "评测服务状态" in page and '<html lang="zh-hans">' in page
    # Each language in its own words, so that a reader of either finds their own.
    assert '<option value="en" lang="en">English</option>' in page
    assert '<option value="zh-hans" lang="zh-hans" selected>简体中文</option>' in page
    page = client.get(f"/problems/{problem.pk}", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "时间限制" in page


def test_the_language_switch_remembers_the_choice(client):
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/problems"})
    assert response.status_code == 302 and response["Location"] == "/problems"
    assert "题目" in client.get("/problems").content.decode()
    # Past the browser's session too (a lab machine's browser asking for English).
    assert response.cookies["django_language"]["max-age"] >= 30 * 24 * 3600


def test_a_form_sent_without_its_token_says_nothing_was_sent_in_the_visitors_language(student, problem):
    """A submit from a page left open past its session (no valid CSRF token): refused, in the
    site's layout and the visitor's language, saying nothing was sent and what to do."""
    from django.test import Client

    from judging.models import Submission

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(student)
    refused = browser.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)"},
                           HTTP_ACCEPT_LANGUAGE="zh-CN")
    page = refused.content.decode()
    assert refused.status_code == 403 and '<html lang="zh-hans">' in page
    assert "表单已过期" in page and "没有发送或保存任何内容" in page
    assert not Submission.objects.exists()
    english = browser.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)"}).content.decode()
    assert "Nothing was sent or saved" in english and 'href="/"' in english


def test_the_chinese_catalogue_is_complete_and_compiled(tmp_path, settings):
    """Every string the pages mark for translation has a Chinese translation, and the
    compiled catalogue the server loads says the same as the source."""
    import gettext
    import os
    import shutil
    import subprocess
    import sys

    from django.conf import settings as conf

    locale = conf.BASE_DIR / "locale"
    po_path = locale / "zh_Hans" / "LC_MESSAGES" / "django.po"
    po = po_path.read_text(encoding="utf-8")
    stats = subprocess.run(["msgfmt", "--statistics", "-o", os.devnull, str(po_path)], capture_output=True,
                           text=True, check=True, env={**os.environ, "LC_ALL": "C"}).stderr
    assert "fuzzy" not in stats and "untranslated" not in stats, stats
    entries = re.findall(r'^(?:msgctxt ((?:".*"\n)+))?msgid ((?:".*"\n)+)(?:msgid_plural ((?:".*"\n)+))?'
                         r'msgstr(?:\[0\])? ((?:".*"\n)+)', po, re.M)
    # The catalogue covers what the templates and code mark today.
    work = tmp_path / "project"
    shutil.copytree(conf.BASE_DIR, work, ignore=shutil.ignore_patterns(
        ".venv", "var", ".git", "node_modules", "tests", "bench", "samples", "node_agent", "__pycache__"))
    from tests.live import operator_environment

    subprocess.run([sys.executable, "manage.py", "makemessages", "-l", "zh_Hans", "--no-location", "-i", "static/*"],
                   cwd=work, check=True, capture_output=True,
                   env=operator_environment(DEBUG=1, DATABASE_URL=f"sqlite:///{tmp_path / 'unused.sqlite3'}"))
    fresh = (work / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po").read_text(encoding="utf-8")
    fresh_ids = set(re.findall(r'^(?:msgctxt ((?:".*"\n)+))?msgid ((?:".*"\n)+)', fresh, re.M))
    assert fresh_ids == {(c, m) for c, m, _p, _s in entries}
    compiled = gettext.GNUTranslations(open(locale / "zh_Hans" / "LC_MESSAGES" / "django.mo", "rb"))
    def text(quoted):
        return "".join(re.findall(r'"(.*)"', quoted)).encode().decode("unicode_escape").encode("latin-1").decode()

    for context, msgid, plural, msgstr in entries:
        key, want = text(msgid), text(msgstr)
        if context:
            assert compiled.pgettext(text(context), key) == want, (context, key)
            continue
        if key:  # Chinese has one plural form: msgstr[0] serves every count
            assert (compiled.ngettext(key, text(plural), 2) if plural else compiled.gettext(key)) == want, key


@pytest.mark.parametrize("odd", ["²", "١", "-1", "0", "9" * 20, "9" * 5000])
def test_a_problem_link_naming_no_exam_is_an_ordinary_problem_page(client, signed_in, student, problem, odd):
    signed_in.logout()
    anonymous = client.get(f"/problems/{problem.pk}", {"exam": odd})
    assert anonymous.status_code == 200 and "Sign in to submit." in anonymous.content.decode()
    client.force_login(student)
    page = client.get(f"/problems/{problem.pk}", {"exam": odd})
    assert page.status_code == 200 and 'name="exam"' not in page.content.decode()
    response = client.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)", "exam": odd})
    assert response.status_code == 302
    assert Submission.objects.get().exam_id is None, "submitted as practice, into no exam"


def test_code_with_a_nul_character_is_refused_from_the_page_as_from_the_api(signed_in, problem):
    from tests.api.helpers import error_of

    response = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)\x00"})
    assert response.status_code == 400
    assert "The code contains a NUL character; remove it and submit again." in response.content.decode()
    api = signed_in.post("/api/v1/submissions", {"problemId": problem.pk, "language": "python", "code": "print(1)\x00"},
                         content_type="application/json")
    assert error_of(api) == (400, "invalid")
    assert not Submission.objects.exists() and not JudgeJob.objects.exists()


def test_an_exam_submit_while_the_clock_disagrees_keeps_the_code_and_says_when_to_retry(
        signed_in, student, problem, settings, monkeypatch):
    from judging import clock
    from tests.factories import make_exam

    exam = make_exam(problem, mode="ACM", participants=[student])
    settings.KECE_CLOCK_CHECK_MS = 3000
    monkeypatch.setattr(clock, "_measure", lambda: 300.0)
    monkeypatch.setitem(clock._last, "at", float("-inf"))  # measured again, five minutes off
    monkeypatch.setitem(clock._last, "skew", clock._last["skew"])
    response = signed_in.post(f"/problems/{problem.pk}?exam={exam.pk}",
                              {"language": "python", "code": "print(42)", "exam": exam.pk})
    page = response.content.decode()
    assert (response.status_code, response["Retry-After"]) == (503, "3")
    assert "your code is kept here. Try again in 3 s." in page and ">print(42)</textarea>" in page
    assert not Submission.objects.exists()


def test_a_practice_link_for_another_problem_promises_nothing(signed_in, student, problem):
    from tests.factories import make_practice

    other = make_practice(make_problem(languages=("python",)))
    page = signed_in.get(f"/problems/{problem.pk}?practice={other.pk}").content.decode()
    assert "This submission counts for the practice." not in page


def test_the_exam_page_names_the_runtime_a_waiting_submission_needs(signed_in, student, problem):
    from tests.factories import make_exam

    exam = make_exam(problem, mode="ACM", participants=[student])
    submit(student, problem, language="cpp", exam_id=exam.pk)
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert "no C++ judge is available right now" in page


def test_signing_in_again_when_signed_in_goes_home_not_round_in_a_loop(signed_in):
    response = signed_in.get("/accounts/login/?next=/accounts/login/")
    assert (response.status_code, response["Location"]) == (302, "/")
    assert signed_in.get("/accounts/login/?next=/problems").headers["Location"] == "/problems"


def test_the_sign_in_page_links_nowhere_to_itself(client):
    page = client.get("/accounts/login/?next=/problems").content.decode()
    assert 'class="signin"' not in page  # the top bar's link, which nested `next` on every click
    assert 'class="signin"' in client.get("/problems").content.decode()


def test_a_result_an_exam_keeps_is_polled_for_slowly(signed_in, student, problem):
    """Hours may pass before the hand-in or the publishing: the page asks every 30 s, not every second."""
    from tests.factories import make_exam

    exam = make_exam(problem, mode="OI", participants=[student])
    waiting = submit(student, problem, exam_id=exam.pk)
    assert 'data-poll-visible="30"' in signed_in.get(f"/submissions/ALGO/{waiting.pk}/live").content.decode()
    practice = submit(student, make_problem(languages=("python",)))
    assert 'data-poll-visible="1"' in signed_in.get(f"/submissions/ALGO/{practice.pk}/live").content.decode()


def test_the_top_bar_marks_the_section_a_page_belongs_to(signed_in, student, problem):
    def marked(path: str) -> list:
        return re.findall(r'<a href="([^"]+)" aria-current="page">', signed_in.get(path).content.decode())

    submission = submit(student, problem)
    assert marked("/problems") == ["/problems"]
    assert marked(f"/problems/{problem.pk}") == ["/problems"]
    assert marked("/submissions") == ["/submissions"]
    assert marked(f"/submissions/ALGO/{submission.pk}") == ["/submissions"]
    assert marked("/lessons") == ["/lessons"]
    assert marked("/") == []
    signed_in.force_login(make_admin())
    assert marked("/admin/exams") == ["/admin/exams"]


def test_a_submitter_edits_their_code_from_its_page_and_no_one_elses(signed_in, student, problem):
    from django.utils import timezone

    code = "a, b = map(int, input().split())\nprint(a - b)  # wrong on purpose\n"
    submission = submit(student, problem, language="cpp", code=code)
    page = signed_in.get(f"/submissions/ALGO/{submission.pk}").content.decode()
    [link] = re.findall(r'<a href="([^"]+)">Edit this code and submit it again</a>', page)
    assert link == f"/problems/{problem.pk}?from={submission.pk}"
    form = signed_in.get(link).content.decode()
    assert re.search(r"<textarea[^>]*>" + re.escape(code.replace(">", "&gt;")) + "</textarea>", form)
    assert re.search(r'<option value="cpp"[^>]*selected', form)

    # A practice deleted since: the code goes to practice on one's own.
    practice = make_practice(problem)
    in_practice = submit(student, problem, code="print(3)", lesson_practice_id=practice.pk)
    practice.deleted_at = timezone.now()
    practice.save(update_fields=["deleted_at"])
    page = signed_in.get(f"/submissions/ALGO/{in_practice.pk}").content.decode()
    assert f'href="/problems/{problem.pk}?from={in_practice.pk}"' in page

    other = UserFactory(username="other")
    theirs = submit(other, problem, code="print('their secret')")
    assert "their secret" not in signed_in.get(f"/problems/{problem.pk}?from={theirs.pk}").content.decode()
    assert signed_in.get(f"/problems/{problem.pk}?from=x").status_code == 200  # no number: an empty form
    elsewhere = submit(student, make_problem(languages=("python",)), code="print('another problem')")
    assert "another problem" not in signed_in.get(f"/problems/{problem.pk}?from={elsewhere.pk}").content.decode()
    # An admin reading the student's submission is offered no edit of it.
    admin = Client()
    admin.force_login(make_admin())
    assert "Edit this code" not in admin.get(f"/submissions/ALGO/{submission.pk}").content.decode()


def test_the_edit_link_submits_into_the_same_exam_while_it_is_open_and_the_same_practice(signed_in, student, problem):
    from django.utils import timezone

    from judging.services.exams import exam_hand_in
    from judging.services.lessons import lesson_create, practice_create
    from tests.factories import make_exam

    practice = practice_create(lesson_id=lesson_create(title="week 1").pk, title="loops", problem_ids=[problem.pk])
    in_practice = submit(student, problem, lesson_practice_id=practice.pk)
    page = signed_in.get(f"/submissions/ALGO/{in_practice.pk}").content.decode()
    assert f'href="/problems/{problem.pk}?from={in_practice.pk}&amp;practice={practice.pk}"' in page
    exam = make_exam(problem, participants=[student], mode="ACM")
    in_exam = submit(student, problem, exam_id=exam.pk)
    page = signed_in.get(f"/submissions/ALGO/{in_exam.pk}").content.decode()
    assert f'href="/problems/{problem.pk}?from={in_exam.pk}&amp;exam={exam.pk}"' in page
    # While the exam holds the problem, the practice submission's code goes into the exam too
    # (the problem's page would refuse it as practice, and its way into the exam kept none).
    page = signed_in.get(f"/submissions/ALGO/{in_practice.pk}").content.decode()
    assert f'href="/problems/{problem.pk}?from={in_practice.pk}&amp;exam={exam.pk}"' in page
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    page = signed_in.get(f"/submissions/ALGO/{in_exam.pk}").content.decode()
    # Handed in, the problem has no form for them until the exam ends: no link, but when.
    assert "Edit this code" not in page and "once your exam ends, at" in page
