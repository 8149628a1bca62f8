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
    assert ">Starts (Asia/Shanghai)</label>" in page and ">Ends (Asia/Shanghai)</label>" in page

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
    assert ">Starts (Asia/Shanghai)</th>" in listed and f"{day.isoformat()} 09:00" in listed
    shown = as_student.get(f"/exams/{exam.pk}").content.decode()
    assert f"{day.isoformat()} 09:00</time>" in shown and "11:00</time> Asia/Shanghai" in shown
    api = as_student.get(f"/api/v1/exams/{exam.pk}").json()
    assert api["startsAt"] == f"{day.isoformat()}T01:00:00Z" and api["endsAt"] == f"{day.isoformat()}T03:00:00Z"


def test_the_failed_work_filter_names_the_zone_its_moments_are_typed_in(shanghai):
    from tests.e2e.conftest import judgers_admin

    admin = _signed_in(judgers_admin())
    page = admin.get("/admin/judgers/failed?since=2026-12-01T09:00").content.decode()
    assert ">From (Asia/Shanghai)</label>" in page and 'value="2026-12-01T09:00"' in page


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
    assert ">Since (Asia/Shanghai)</label>" in admin.get(f"/admin/judgers/{node.pk}").content.decode()
    response = admin.post(f"/admin/judgers/{node.pk}/rejudge", {"since": typed.strftime("%Y-%m-%dT%H:%M")})
    assert response.status_code == 302
    operation = RejudgeOperation.objects.get()
    assert operation.total == 1  # read as Shanghai's time: eight hours later as UTC, it would find nothing
    utc = typed.astimezone(zoneinfo.ZoneInfo("UTC"))
    assert operation.selector["since"] == utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    page = admin.get("/admin/judgers/rejudges").content.decode()
    assert f"since {typed.strftime('%Y-%m-%d %H:%M')} Asia/Shanghai" in page
