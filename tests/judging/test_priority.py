"""Claim order under pressure: exam work first, FIFO inside a class, aging, the user's share."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from judging.models import JobState, JudgeJob, PriorityClass
from judging.services.rejudge import submission_rejudge
from tests.factories import HostGroupFactory, UserFactory, make_node
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


@pytest.fixture
def slots(db):
    """A python node of four slots, alone in its host group."""
    return make_node(pool="python", max_slots=4, host_group=HostGroupFactory(total_slots=4))[1]


def _rejudge_backlog(problem, count, *, now):
    """`count` bulk-rejudge jobs, queued at `now`, of submissions judged long ago."""
    users = [UserFactory() for _ in range(8)]
    jobs = []
    for index in range(count):
        submission = submit(users[index % 8], problem, now=now - timedelta(days=1))
        JudgeJob.objects.filter(pk=submission.current_judge_job_id).update(state=JobState.COMPLETED)
        jobs.append(submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=now,
                                       priority_class=PriorityClass.REJUDGE))
    return jobs


def _free_one_slot(identity, job, *, now):
    assert settle(identity, judged(job), now=now) == "settled"


def test_exam_work_posted_after_a_rejudge_backlog_is_claimed_next_and_practice_before_the_rest(
        problem, slots, student):
    now = timezone.now()
    backlog = _rejudge_backlog(problem, 200, now=now)
    running = claim(slots, free_slots=4, now=now)
    assert [job.pk for job in running] == [job.pk for job in backlog[:4]]  # FIFO inside the class

    exam = submit(UserFactory(), problem, now=now + timedelta(seconds=1), priority_class=PriorityClass.EXAM)
    practice = submit(student, problem, now=now + timedelta(seconds=2))
    later = now + timedelta(seconds=3)
    _free_one_slot(slots, running[0], now=later)
    [next_job] = claim(slots, now=later)
    assert next_job.pk == exam.current_judge_job_id and next_job.priority_class == PriorityClass.EXAM
    _free_one_slot(slots, running[1], now=later)
    [after] = claim(slots, now=later)
    assert after.pk == practice.current_judge_job_id
    _free_one_slot(slots, running[2], now=later)
    [rejudge] = claim(slots, now=later)
    assert rejudge.pk == backlog[4].pk


def test_no_job_waits_longer_than_the_bound_behind_newer_exam_work(problem, slots, settings):
    settings.KECE_MAX_CLASS_WAIT_S = 20
    start = timezone.now()
    [waiting] = _rejudge_backlog(problem, 1, now=start)
    # The pool is saturated with exam work that keeps arriving: each second one slot frees,
    # one exam answer arrives and one job is claimed.
    held = [submit(UserFactory(), problem, now=start, priority_class=PriorityClass.EXAM) for _ in range(4)]
    running = claim(slots, free_slots=4, now=start)
    assert {j.pk for j in running} == {s.current_judge_job_id for s in held}
    claimed_at = None
    for second in range(1, 60):
        now = start + timedelta(seconds=second)
        submit(UserFactory(), problem, now=now, priority_class=PriorityClass.EXAM)
        _free_one_slot(slots, running.pop(0), now=now)
        [job] = claim(slots, now=now)
        if job.pk == waiting.pk:
            claimed_at = now
            break
        running.append(job)
    assert claimed_at is not None, "the rejudge job starved behind exam work"
    wait = (claimed_at - start).total_seconds()
    # Exam answers due up to the bound after it go first; none due later does.
    assert 20 <= wait <= 21


def test_one_users_burst_does_not_starve_another_user(problem, slots, settings, unlimited_submits):
    settings.KECE_USER_INFLIGHT = 4
    now = timezone.now()
    flooder, other = UserFactory(), UserFactory()
    for index in range(50):
        submit(flooder, problem, now=now + timedelta(milliseconds=index))
    late = submit(other, problem, now=now + timedelta(seconds=1))

    order = []
    for step in range(settings.KECE_USER_INFLIGHT + 1):
        at = now + timedelta(seconds=2 + step)
        [job] = claim(slots, now=at)
        order.append(job.user_id)
        _free_one_slot(slots, job, now=at)
    assert other.pk in order
    assert order.index(other.pk) == settings.KECE_USER_INFLIGHT  # right after the flooder's share


def test_a_burst_alone_in_its_pool_still_uses_every_slot(problem, slots, settings, student):
    settings.KECE_USER_INFLIGHT = 2
    now = timezone.now()
    for _ in range(6):
        submit(student, problem, now=now)
    assert len(claim(slots, free_slots=4, now=now)) == 4


def test_a_job_beyond_the_users_share_says_why_on_its_page_and_stays_queued_in_the_api(
        problem, settings, student, client, node_a):
    settings.KECE_USER_INFLIGHT = 1
    first = submit(student, problem)
    second = submit(student, problem)
    client.force_login(student)
    words = "Waiting behind other students"
    assert words not in client.get(f"/submissions/ALGO/{first.pk}").content.decode()
    assert words in client.get(f"/submissions/ALGO/{second.pk}").content.decode()
    assert words in client.get("/submissions").content.decode()
    # The user API's waitReason is frozen: still `queued`.
    body = client.get(f"/api/v1/submissions/ALGO/{second.pk}").json()
    assert body["status"] == "PENDING" and body["waitReason"] == "queued"


def test_a_single_rejudge_keeps_the_class_of_the_job_it_replaces(problem):
    exam = submit(UserFactory(), problem, priority_class=PriorityClass.EXAM)
    job = submission_rejudge(submission_type="ALGO", submission_id=exam.pk, now=timezone.now())
    assert job.priority_class == PriorityClass.EXAM
    practice = submit(UserFactory(), problem)
    job = submission_rejudge(submission_type="ALGO", submission_id=practice.pk, now=timezone.now())
    assert job.priority_class == PriorityClass.PRACTICE


def test_a_requeued_job_keeps_its_class_lead(problem, slots):
    from judging.priority import claim_key
    from judging.services import outcomes
    from judging.locking import lock_job
    from django.db import transaction

    exam = submit(UserFactory(), problem, priority_class=PriorityClass.EXAM)
    [job] = claim(slots)
    now = timezone.now()
    with transaction.atomic():
        outcomes.requeue(lock_job(job.pk), now=now, error="infra")
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.claim_key == claim_key(PriorityClass.EXAM, job.available_at)
    assert exam.pk


def test_a_job_beyond_its_users_share_stays_behind_other_users_when_it_comes_back(
        problem, slots, settings, unlimited_submits):
    """A node gives back the flooder's second job (a restart, a lost lease): it queues again
    behind another user's work, not with the full practice lead, and still counts for no
    backlog."""
    from judging.priority import FAIR_SHARE
    from judging.pressure import admission
    from tests.judging.helpers import released

    settings.KECE_USER_INFLIGHT = 1
    now = timezone.now()
    flooder, other = UserFactory(), UserFactory()
    submit(flooder, problem, now=now)
    beyond = submit(flooder, problem, now=now)
    first, second = claim(slots, free_slots=2, now=now)
    given_back = second if second.submission_id == beyond.pk else first
    assert settle(slots, released(given_back), now=now + timedelta(seconds=1)) == "requeued"
    later = submit(other, problem, now=now + timedelta(seconds=2))

    given_back.refresh_from_db()
    assert given_back.wait_reason == FAIR_SHARE
    [job] = claim(slots, now=now + timedelta(seconds=3))
    assert job.submission_id == later.pk, "the flooder's job came back ahead of another user's"
    # One queued job within its user's share would hold practice at the door; it is not one.
    settings.KECE_THROTTLE_BACKLOG = {"*": 1}
    assert not admission(pool="python", now=now + timedelta(seconds=3), user_id=other.pk).throttled


def test_an_exam_job_keeps_its_participants_turn_when_it_comes_back(problem, slots, settings):
    from judging.priority import class_lead
    from tests.factories import make_exam
    from tests.judging.helpers import released

    settings.KECE_EXAM_SUBMIT_RATE = None
    now = timezone.now()
    taker = UserFactory()
    exam = make_exam(problem, mode="ACM", participants=[taker], now=now)
    submit(taker, problem, exam_id=exam.pk, now=now)
    second = submit(taker, problem, exam_id=exam.pk, now=now)
    queued = JudgeJob.objects.get(pk=second.current_judge_job_id)
    turn = queued.available_at - queued.claim_key
    assert turn < class_lead(PriorityClass.EXAM), "its second job takes a later turn"
    jobs = claim(slots, free_slots=2, now=now)
    [job] = [j for j in jobs if j.submission_id == second.pk]
    settle(slots, released(job), now=now + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.available_at - job.claim_key == turn


def test_the_claim_walks_its_index_as_a_range_without_a_filesort(problem, slots):
    now = timezone.now()
    _rejudge_backlog(problem, 40, now=now)
    for index in range(40):
        submit(UserFactory(), problem, now=now + timedelta(seconds=index), priority_class=PriorityClass.EXAM)
    make_node(pool="cpp")
    with CaptureQueriesContext(connection) as queries:
        claim(slots, now=now + timedelta(minutes=1))
    [pick] = [q["sql"] for q in queries if "SKIP LOCKED" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + pick)
        columns = [c[0] for c in cursor.description]
        [plan] = [dict(zip(columns, row)) for row in cursor.fetchall()]
    assert plan["key"] == "judge_job_claim", plan
    # On a table without statistics MariaDB plans a range up to now; once the table has
    # them (ANALYZE, or a recalculation left by earlier tests) it plans a ref on (pool,
    # state) and checks claim_key on the index (index condition pushdown). Both read the
    # index in claim order and stop at the LIMIT.
    assert plan["type"] in ("range", "ref"), plan
    assert "filesort" not in (plan["Extra"] or ""), plan
