"""The console's failed-work page: SYSTEM_ERROR jobs and dead events, filtered, explained, and
sent round again after the impact is stated; audited."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import EventState, JobState, JudgeJob, RejudgeOperation, SettlementEvent, Submission
from judging.services.bulk_rejudge import rejudge_request, rejudges_advance
from nodes.models import NodeAudit
from tests.api.helpers import make_admin, make_teacher, session_client
from tests.factories import HostGroupFactory, UserFactory, make_node
from tests.judging.helpers import claim, infra_error, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]
PAGE = "/admin/judgers/failed"


def _fail(identity, problem, *, error="sandbox_crashed", now=None):
    """A submission whose every attempt ends in an infrastructure error: SYSTEM_ERROR."""
    now = now or timezone.now()
    submission = submit(UserFactory(), problem, now=now)
    job = JudgeJob.objects.get(pk=submission.current_judge_job_id)
    while job.state != JobState.FAILED:
        JudgeJob.objects.filter(pk=job.pk).update(available_at=now, claim_key=now, avoid_node_id=None)
        [job] = claim(identity, now=now)
        settle(identity, infra_error(job, error=error), now=now)
        job.refresh_from_db()
    return submission, job


@pytest.fixture
def fleet(db, settings):
    # These nodes fail on purpose, job after job: quarantine is tested elsewhere.
    settings.KECE_QUARANTINE_INFRA_ERRORS = 1000
    group = HostGroupFactory(total_slots=8)
    return make_node(pool="python", name="flaky", host_group=group), make_node(pool="python", name="sound",
                                                                               host_group=group)


@pytest.fixture
def admin(db):
    return session_client(make_admin())


def test_it_lists_failed_jobs_with_why_and_filters_them(admin, problem, fleet):
    (flaky, flaky_id), (sound, sound_id) = fleet
    crashed, crashed_job = _fail(flaky_id, problem, error="sandbox_crashed")
    lost, _lost_job = _fail(sound_id, problem, error="artifact_missing")
    ok = submit(UserFactory(), problem)
    [job] = claim(sound_id)
    settle(sound_id, judged(job))

    page = admin.get(PAGE).content.decode()
    assert "2 failed judge jobs" in page and "sandbox_crashed" in page and "artifact_missing" in page
    assert f"Program {ok.pk}<" not in page
    only_flaky = admin.get(PAGE, {"node": flaky.pk}).content.decode()
    assert f"Program {crashed.pk}<" in only_flaky and f"Program {lost.pk}<" not in only_flaky
    by_error = admin.get(PAGE, {"error": "artifact_missing"}).content.decode()
    assert f"Program {lost.pk}<" in by_error and f"Program {crashed.pk}<" not in by_error
    later = admin.get(PAGE, {"since": (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")})
    assert "0 failed judge jobs" in later.content.decode()


def test_the_page_reads_each_failed_job_once_and_not_its_heavy_copies(admin, problem, fleet):
    """An outage leaves thousands of failed jobs: the page counts them once and reads only
    what it lists, never a job's snapshot or result (kilobytes each: seconds a page, and
    hundreds of megabytes to confirm "all that match")."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    (_flaky, flaky_id), _ = fleet
    _fail(flaky_id, problem)
    with CaptureQueriesContext(connection) as queries:
        assert "1 failed judge job" in admin.get(PAGE).content.decode()
        confirm = admin.post(PAGE, {"action": "requeue", "scope": "all"}).content.decode()
    assert "will be judged again" in confirm
    reads = [q["sql"] for q in queries.captured_queries if "FROM `judge_job`" in q["sql"]]
    assert not [sql for sql in reads if "`snapshot`" in sql or "`result`" in sql], reads
    assert len([sql for sql in reads if sql.startswith("SELECT COUNT(*)")]) == 1, reads


def test_a_hidden_check_that_failed_is_not_failed_work(admin, problem, fleet):
    (flaky, flaky_id), _ = fleet
    _submission, job = _fail(flaky_id, problem)
    JudgeJob.objects.filter(pk=job.pk).update(bound_node_id=flaky.pk)  # as a canary of the node is
    assert "0 failed judge jobs" in admin.get(PAGE).content.decode()


def test_a_failed_job_replaced_by_a_rejudge_is_no_longer_failed_work(admin, problem, fleet):
    (_flaky, flaky_id), _ = fleet
    submission, _job = _fail(flaky_id, problem)
    rejudge_request(selector={"submissions": [{"type": "ALGO", "id": submission.pk}]}, actor=None,
                    now=timezone.now())
    rejudges_advance(now=timezone.now())
    assert "0 failed judge jobs" in admin.get(PAGE).content.decode()


def test_requeueing_states_the_impact_first_then_rejudges_the_chosen_and_audits(admin, problem, fleet):
    (_flaky, flaky_id), (_sound, sound_id) = fleet
    first, first_job = _fail(flaky_id, problem)
    second, _ = _fail(flaky_id, problem)
    asked = admin.post(PAGE, {"action": "requeue", "scope": "selected", "job": [first_job.pk]})
    assert asked.status_code == 200
    text = asked.content.decode()
    assert "1 submission now showing SYSTEM_ERROR (Python 1) will be judged again" in text
    assert RejudgeOperation.objects.count() == 0, "nothing happens before the operator confirms"

    done = admin.post(PAGE, {"action": "requeue", "scope": "selected", "job": [first_job.pk], "confirm": "1"})
    assert done.status_code == 302 and done["Location"] == "/admin/judgers/rejudges"
    operation = RejudgeOperation.objects.get()
    assert list(operation.items.values_list("submission_id", flat=True)) == [first.pk]
    audit = NodeAudit.objects.get(action="failed_requeued")
    assert audit.before == {"jobs": [first_job.pk]} and audit.after == {"rejudge": operation.pk}
    assert audit.actor_name == "admin"

    rejudges_advance(now=timezone.now())
    [again] = claim(sound_id)
    assert (again.submission_id, again.generation) == (first.pk, 2)
    assert settle(sound_id, judged(again)) == "settled"
    assert Submission.objects.get(pk=first.pk).verdict == "AC"
    assert Submission.objects.get(pk=second.pk).verdict is None, "what was not chosen stays failed"


def test_all_that_match_takes_every_failed_job_of_the_filter(admin, problem, fleet):
    (flaky, flaky_id), (_sound, sound_id) = fleet
    flaky_failures = {_fail(flaky_id, problem)[0].pk for _ in range(3)}
    _fail(sound_id, problem)
    admin.post(PAGE, {"action": "requeue", "scope": "all", "node": flaky.pk, "confirm": "1"})
    assert set(RejudgeOperation.objects.get().items.values_list("submission_id", flat=True)) == flaky_failures
    # Until the operation has queued them, they are on their way, not failed work to send again.
    page = admin.get(PAGE, {"node": flaky.pk}).content.decode()
    assert "0 failed judge jobs" in page
    admin.post(PAGE, {"action": "requeue", "scope": "all", "node": flaky.pk, "confirm": "1"})
    assert RejudgeOperation.objects.count() == 1, "each would be judged twice, the first run cancelled"


def test_dead_events_are_listed_with_their_error_and_dispatched_again(admin, problem, fleet):
    (_flaky, _), (_sound, sound_id) = fleet
    submission = submit(UserFactory(), problem)
    [job] = claim(sound_id)
    settle(sound_id, judged(job))
    event = SettlementEvent.objects.get(job=job)
    SettlementEvent.objects.filter(pk=event.pk).update(state=EventState.DEAD, attempts=8,
                                                       last_error="OperationalError: lock wait timeout")
    page = admin.get(PAGE).content.decode()
    assert "1 dead event" in page and "lock wait timeout" in page
    confirm = admin.post(PAGE, {"action": "retry", "scope": "selected", "event": [event.pk]}).content.decode()
    assert "1 dead event will be dispatched again" in confirm
    assert SettlementEvent.objects.get(pk=event.pk).state == EventState.DEAD
    admin.post(PAGE, {"action": "retry", "scope": "selected", "event": [event.pk], "confirm": "1"})
    row = SettlementEvent.objects.get(pk=event.pk)
    assert (row.state, row.attempts) == (EventState.PENDING, 0)
    assert NodeAudit.objects.get(action="events_retried").after == {"retried": 1}
    assert submission.pk


def test_dead_events_past_the_first_page_are_reached_by_its_pager(admin, problem, fleet):
    from nodes.console.failed import PAGE_SIZE

    (_flaky, _), (_sound, sound_id) = fleet
    submit(UserFactory(), problem)
    [job] = claim(sound_id)
    settle(sound_id, judged(job))
    [event] = SettlementEvent.objects.filter(job=job)
    SettlementEvent.objects.bulk_create([
        SettlementEvent(job=job, event_type=f"dead-{i}", payload=event.payload, state=EventState.DEAD,
                        next_attempt_at=event.next_attempt_at, created_at=event.created_at)
        for i in range(PAGE_SIZE + 10)])
    page = admin.get(PAGE).content.decode()
    assert page.count('<tr data-event="') == PAGE_SIZE and 'class="pager"' in page
    assert admin.get(PAGE, {"page": 2}).content.decode().count('<tr data-event="') == 10


@pytest.mark.parametrize("query", [{"since": "2024-02-30T10:00"}, {"until": "0001-01-01T00:00+05:00"},
                                   {"node": "²"}, {"pool": "cobol"}, {"node": "9" * 30}])
def test_a_filter_that_means_nothing_is_refused_in_words(admin, query):
    response = admin.get(PAGE, query)
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode()


def test_nothing_chosen_is_refused_in_words(admin, problem, fleet):
    (_flaky, flaky_id), _ = fleet
    _fail(flaky_id, problem)
    response = admin.post(PAGE, {"action": "requeue", "scope": "selected", "confirm": "1"})
    assert response.status_code == 400 and "Nothing was chosen" in response.content.decode()
    assert RejudgeOperation.objects.count() == 0


def test_only_admins_reach_it(client, db):
    assert client.get(PAGE).status_code == 302
    assert session_client(make_teacher()).get(PAGE).status_code == 403
    assert session_client(UserFactory()).post(PAGE, {"action": "retry", "scope": "all", "confirm": "1"}) \
        .status_code == 403


def test_the_node_rejudge_covers_what_failed_on_the_node(problem, fleet):
    (flaky, flaky_id), _ = fleet
    start = timezone.now()
    failed, _ = _fail(flaky_id, problem, now=start)
    operation = rejudge_request(selector={"nodeId": flaky.pk, "since": start - timedelta(minutes=1)}, actor=None,
                                now=start + timedelta(minutes=1))
    assert list(operation.items.values_list("submission_id", flat=True)) == [failed.pk]
