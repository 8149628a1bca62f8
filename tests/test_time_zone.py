"""The pages speak the school's time (`KECE_TIME_ZONE`): an exam a teacher sets for nine in
the morning in Shanghai starts at 01:00 UTC, and every page that shows it says nine and
names the zone; the API keeps UTC with `Z`, as its contract writes timestamps."""

import zoneinfo
from datetime import datetime, time, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from judging.models import Exam, ExamParticipant
from tests.api.helpers import person
from tests.judging.test_exam_console import exam_form, exam_manager

pytestmark = pytest.mark.django_db

SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")


@pytest.fixture
def shanghai(settings):
    settings.KECE_TIME_ZONE = "Asia/Shanghai"


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_exam_set_for_nine_in_shanghai_starts_at_one_utc_and_the_pages_say_nine(shanghai):
    day = timezone.localtime(timezone.now(), SHANGHAI).date() + timedelta(days=2)
    nine = datetime.combine(day, time(9, 0))  # as the teacher types it, in no zone
    teacher = _signed_in(exam_manager())
    page = teacher.get("/admin/exams/new").content.decode()
    assert ">Starts (Beijing time)</label>" in page and ">Ends (Beijing time)</label>" in page

    response = teacher.post("/admin/exams/new", exam_form(starts=nine, ends=nine + timedelta(hours=2)))
    assert response.status_code == 302
    exam = Exam.objects.get()
    assert exam.starts_at == datetime.combine(day, time(1, 0), tzinfo=zoneinfo.ZoneInfo("UTC"))
    edit = teacher.get(f"/admin/exams/{exam.pk}/edit").content.decode()
    assert f'value="{day.isoformat()}T09:00"' in edit  # the form gives back what was typed

    student = person("ann")
    ExamParticipant.objects.create(exam=exam, user=student)
    as_student = _signed_in(student)
    listed = as_student.get("/exams").content.decode()
    assert ">Starts (Beijing time)</th>" in listed and f"{day.isoformat()} 09:00" in listed
    shown = as_student.get(f"/exams/{exam.pk}").content.decode()
    assert f"{day.isoformat()} 09:00</time>" in shown and "11:00</time> Beijing time" in shown
    chinese = as_student.get(f"/exams/{exam.pk}", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "11:00</time> 北京时间" in chinese  # as people there say it, not "Asia/Shanghai"
    api = as_student.get(f"/api/v1/exams/{exam.pk}").json()
    assert api["startsAt"] == f"{day.isoformat()}T01:00:00Z" and api["endsAt"] == f"{day.isoformat()}T03:00:00Z"


def test_the_failed_work_filter_names_the_zone_its_moments_are_typed_in(shanghai):
    from tests.e2e.conftest import judgers_admin

    admin = _signed_in(judgers_admin())
    page = admin.get("/admin/judgers/failed?since=2026-12-01T09:00").content.decode()
    assert ">From (Beijing time)</label>" in page and 'value="2026-12-01T09:00"' in page


def test_without_a_zone_set_the_pages_say_utc(settings):
    student = person("ann")
    exam = Exam.objects.create(title="midterm", mode="OI", starts_at=timezone.now() + timedelta(hours=1),
                               ends_at=timezone.now() + timedelta(hours=2))
    ExamParticipant.objects.create(exam=exam, user=student)
    shown = _signed_in(student).get(f"/exams/{exam.pk}").content.decode()
    assert timezone.localtime(exam.ends_at, zoneinfo.ZoneInfo("UTC")).strftime("%H:%M") + "</time> UTC" in shown


def test_a_nodes_rejudge_moment_is_typed_kept_in_utc_and_shown_in_the_schools_zone(shanghai, student, problem):
    from judging.models import RejudgeOperation
    from tests.e2e.conftest import judgers_admin
    from tests.factories import make_node
    from tests.judging.helpers import claim, judged, settle, submit

    node, identity = make_node(pool="python", name="py-bad")
    start = timezone.now()
    submit(student, problem, language="python")
    for job in claim(identity):
        assert settle(identity, judged(job)) == "settled"
    typed = timezone.localtime(start - timedelta(minutes=1), SHANGHAI).replace(second=0, microsecond=0)
    admin = _signed_in(judgers_admin())
    assert ">Since (Beijing time)</label>" in admin.get(f"/admin/judgers/{node.pk}").content.decode()
    response = admin.post(f"/admin/judgers/{node.pk}/rejudge", {"since": typed.strftime("%Y-%m-%dT%H:%M")})
    assert response.status_code == 302
    operation = RejudgeOperation.objects.get()
    assert operation.total == 1  # read as Shanghai's time: eight hours later as UTC, it would find nothing
    utc = typed.astimezone(zoneinfo.ZoneInfo("UTC"))
    assert operation.selector["since"] == utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    page = admin.get("/admin/judgers/rejudges").content.decode()
    assert f"since {typed.strftime('%Y-%m-%d %H:%M')} Beijing time" in page


def test_the_api_reads_and_writes_utc_whatever_zone_the_pages_speak(shanghai):
    """A naive time sent to the API is UTC, as the contract says; only the pages read typed
    times in the school's zone."""
    from tests.api.helpers import token_client
    from tests.factories import make_exam, make_problem

    exam = make_exam(make_problem(), now=timezone.now() + timedelta(days=3))
    day = (timezone.now() + timedelta(days=2)).date()
    api = token_client(exam_manager("tess"))
    response = api.patch(f"/api/v1/admin/exams/{exam.pk}", {"revision": exam.revision,
                                                             "startsAt": f"{day.isoformat()}T09:00:00"},
                         content_type="application/json")
    assert response.status_code == 200, response.content
    exam.refresh_from_db()
    assert exam.starts_at == datetime.combine(day, time(9, 0), tzinfo=zoneinfo.ZoneInfo("UTC"))
    assert response.json()["startsAt"] == f"{day.isoformat()}T09:00:00Z"


def test_the_django_admin_keeps_utc_and_needs_no_zone_tables_in_the_database(shanghai):
    # django-axes' pages drill down by date: with the zone active, MySQL's CONVERT_TZ would
    # answer NULL on a database without its zone tables, and the page would be a 500.
    from axes.models import AccessAttempt

    AccessAttempt.objects.create(username="someone", ip_address="10.0.0.1", user_agent="x", failures_since_start=1,
                                 get_data="", post_data="", http_accept="", path_info="/accounts/login/")
    admin = person("root", is_staff=True, is_superuser=True)
    page = _signed_in(admin).get("/django-admin/axes/accessattempt/")
    assert page.status_code == 200 and "someone" in page.content.decode()


def test_a_far_off_year_typed_in_the_schools_zone_is_refused_in_words_not_a_500(settings):
    from tests.e2e.conftest import judgers_admin
    from tests.factories import make_node

    settings.KECE_TIME_ZONE = "America/New_York"
    teacher = _signed_in(exam_manager())
    far = datetime(9999, 12, 31, 23, 0)
    response = teacher.post("/admin/exams/new", exam_form(starts=far - timedelta(hours=2), ends=far))
    assert response.status_code == 400 and "Give a date between the years 2000 and 9000." in response.content.decode()
    assert not Exam.objects.exists()

    settings.KECE_TIME_ZONE = "Asia/Shanghai"
    node, _identity = make_node(pool="python", name="py-far")
    refused = _signed_in(judgers_admin()).post(f"/admin/judgers/{node.pk}/rejudge", {"since": "0001-01-01T00:00"})
    assert refused.status_code == 400 and "is not a date and time to rejudge from" in refused.content.decode()
