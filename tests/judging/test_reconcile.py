"""Reconciliation: each of the design's gates, broken on purpose, is found; what is safe to
repair is repaired through the services; the report is kept and shown."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from judging.models import (
    EventState, FirstAccepted, JobState, JudgeJob, ProblemResult, ReconcileReport, SettlementEvent, Submission,
)
from judging.services.events import events_dispatch
from judging.services.reconcile import reconcile_check, reconcile_run
from tests.api.helpers import make_admin, session_client
from tests.factories import UserFactory, make_exam, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


def _counts(now=None):
    return {name: found["count"] for name, found in reconcile_check(now=now or timezone.now()).items()}


def _judged(problem, identity, verdict="AC"):
    submission = submit(UserFactory(), problem)
    [job] = claim(identity)
    assert settle(identity, judged(job, verdict=verdict)) == "settled"
    while events_dispatch(now=timezone.now()).applied:
        pass
    return submission, job


def test_a_healthy_table_has_nothing_to_report(problem, node_a):
    _, identity = node_a
    _judged(problem, identity)
    taker = UserFactory()
    exam = make_exam(make_problem(), mode="OI", participants=[taker])
    submit(taker, exam.problems.get().problem, exam_id=exam.pk)  # OI: saved without a job until hand-in
    submit(UserFactory(), problem)  # queued, not judged yet: in order
    assert set(_counts().values()) == {0}


def test_a_submission_without_its_job_is_reported_not_repaired(problem, node_a):
    submission = submit(UserFactory(), problem)
    Submission.objects.filter(pk=submission.pk).update(current_judge_job=None)
    report = reconcile_run(now=timezone.now(), repair=True)
    assert report.findings["submission_without_job"] == {"count": 1, "sample": [f"ALGO:{submission.pk}"]}
    assert "submission_without_job" not in report.repaired, "a person decides"


def test_an_overdue_lease_is_found_and_reaped(problem, node_a):
    _, identity = node_a
    submit(UserFactory(), problem)
    [job] = claim(identity)
    late = job.lease_until + timedelta(minutes=5)
    assert _counts(late)["running_without_lease"] == 1
    report = reconcile_run(now=late, repair=True)
    assert report.repaired["running_without_lease"] == 1
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.QUEUED
    assert _counts(late)["running_without_lease"] == 0


def test_a_settled_job_without_its_events_gets_them_and_its_rows(problem, node_a):
    _, identity = node_a
    submission, job = _judged(problem, identity)
    SettlementEvent.objects.filter(job_id=job.pk).delete()
    ProblemResult.objects.all().delete()
    FirstAccepted.objects.all().delete()
    assert _counts()["settled_without_events"] == 1
    report = reconcile_run(now=timezone.now(), repair=True)
    assert report.repaired["settled_without_events"] == 1
    while events_dispatch(now=timezone.now()).applied:
        pass
    assert FirstAccepted.objects.get().submission_id == submission.pk
    assert set(_counts().values()) == {0}
    again = reconcile_run(now=timezone.now(), repair=True)
    assert again.total == 0 and SettlementEvent.objects.filter(job_id=job.pk).count() == 1, "never twice"


def test_a_delivered_event_whose_rows_are_gone_is_made_due_again(problem, node_a):
    _, identity = node_a
    submission, _job = _judged(problem, identity)
    FirstAccepted.objects.all().delete()
    assert _counts()["event_without_derived_rows"] == 1
    reconcile_run(now=timezone.now(), repair=True)
    assert SettlementEvent.objects.get().state == EventState.PENDING
    events_dispatch(now=timezone.now())
    assert FirstAccepted.objects.get().submission_id == submission.pk


def test_a_result_of_another_generation_is_reported(problem, node_a):
    _, identity = node_a
    submission, _job = _judged(problem, identity)
    Submission.objects.filter(pk=submission.pk).update(judged_generation=7)
    assert _counts()["two_results_for_a_generation"] == 1


def test_the_command_prints_each_check_and_the_console_shows_the_last_report(problem, node_a):
    call_command("reconcile", stdout=StringIO())  # nothing out of place: exit status 0
    submission = submit(UserFactory(), problem)
    Submission.objects.filter(pk=submission.pk).update(current_judge_job=None)
    out = StringIO()
    with pytest.raises(CommandError, match="1 finding\\(s\\) left") as left:
        call_command("reconcile", stdout=out)
    assert left.value.returncode == 1, "a cron job sees it"
    text = out.getvalue()
    assert f"submission_without_job: 1 (e.g. ALGO:{submission.pk}), needs a person" in text
    assert "running_without_lease: 0" in text and "(check only" in text
    assert ReconcileReport.objects.latest("pk").repair is False
    page = session_client(make_admin()).get("/admin/judgers/failed").content.decode()
    assert "found 1 thing out of place" in page and f"ALGO:{submission.pk}" in page


def test_the_periodic_work_runs_it_daily():
    from kece.scheduler import PERIODIC_TASKS

    assert ("judging.reconcile", 86400.0) in PERIODIC_TASKS()


def test_what_a_run_leaves_for_a_person_is_a_figure_and_a_repairing_run_by_hand_is_the_steps_success(student, problem):
    """Only a figure can page someone: /metrics serves what the last run left, by check; and
    `reconcile --repair` by hand, as the runbook says, counts as the daily step's success."""
    from django.core.cache import cache

    from kece import metrics
    from kece.periodic import last_success

    submission = submit(student, problem)
    Submission.objects.filter(pk=submission.pk).update(current_judge_job=None)
    with pytest.raises(CommandError):
        call_command("reconcile", stdout=StringIO())
    assert cache.get(metrics.RECONCILE_FINDINGS_KEY)["submission_without_job"] == 1
    assert last_success("reconcile") is None
    with pytest.raises(CommandError):
        call_command("reconcile", "--repair", stdout=StringIO())
    assert last_success("reconcile") is not None
