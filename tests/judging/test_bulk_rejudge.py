"""Bulk rejudge as an operation: progress to total, verdicts that moved, cancel, backpressure."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import FirstAccepted, JobState, JudgeJob, PriorityClass, RejudgeState, Submission
from judging.services.bulk_rejudge import rejudge_cancel, rejudge_progress, rejudge_request, rejudges_advance
from judging.services.events import events_dispatch
from kece.errors import Invalid
from tests.factories import HostGroupFactory, UserFactory, make_node
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


@pytest.fixture
def wide(db):
    return make_node(pool="python", max_slots=32, host_group=HostGroupFactory(total_slots=32))


def _judge_all(identity, verdict_of, *, now) -> int:
    """Claim and settle everything due in the pool; `verdict_of(job)` decides each verdict."""
    count = 0
    while jobs := claim(identity, free_slots=32, now=now):
        for job in jobs:
            assert settle(identity, judged(job, verdict=verdict_of(job)), now=now) == "settled"
        count += len(jobs)
    return count


def _judged_then_rejudged(problem, identity, count, *, now):
    """`count` submissions of as many students, judged AC, then a bulk rejudge of the problem."""
    for _ in range(count):
        submit(UserFactory(), problem, now=now)
    _judge_all(identity, lambda job: "AC", now=now)
    return rejudge_request(selector={"problemId": problem.pk}, actor=None, now=now)


def _drain_events(now):
    while events_dispatch(now=now).applied:
        pass


def test_a_bulk_rejudge_of_300_moves_to_its_total_counts_what_changed_and_first_accepted_follows(
        problem, wide, settings):
    settings.KECE_REJUDGE_BATCH = 50
    _node, identity = wide
    now = timezone.now()
    users = [UserFactory() for _ in range(30)]
    submissions = [submit(users[i % 30], problem, now=now) for i in range(300)]
    assert _judge_all(identity, lambda job: "AC", now=now) == 300
    _drain_events(now)
    assert FirstAccepted.objects.filter(problem=problem).count() == 30

    operation = rejudge_request(selector={"problemId": problem.pk}, actor=None, now=now)
    assert operation.total == 300
    # The new test data fails every submission of the first ten users.
    failing = {u.pk for u in users[:10]}
    later = now + timedelta(seconds=5)
    progress = []
    while rejudges_advance(now=later):
        queued = JudgeJob.objects.filter(state=JobState.QUEUED, priority_class=PriorityClass.REJUDGE).count()
        assert queued <= 50  # a batch at a time, never the whole operation
        _judge_all(identity, lambda job: "WA" if job.user_id in failing else "AC", now=later)
        progress.append(rejudge_progress(operation)["judged"])
    assert progress == sorted(progress) and progress[-1] == 300
    rejudges_advance(now=later)  # finds nothing left and closes the operation
    operation.refresh_from_db()
    assert rejudge_progress(operation) == {"id": operation.pk, "state": RejudgeState.DONE, "total": 300,
                                           "enqueued": 300, "judged": 300, "changed": 100, "skipped": 0}
    _drain_events(later)
    assert set(FirstAccepted.objects.filter(problem=problem).values_list("user_id", flat=True)) == {
        u.pk for u in users[10:]}
    assert Submission.objects.filter(pk__in=[s.pk for s in submissions], verdict="WA").count() == 100


def test_cancelling_mid_way_stops_enqueuing_and_leaves_what_ran(problem, wide, settings):
    settings.KECE_REJUDGE_BATCH = 20
    _node, identity = wide
    now = timezone.now()
    operation = _judged_then_rejudged(problem, identity, 60, now=now)
    assert rejudges_advance(now=now) == 20
    _judge_all(identity, lambda job: "WA", now=now)
    assert rejudges_advance(now=now) == 20
    cancelled = rejudge_cancel(rejudge_id=operation.pk, now=now)
    assert rejudges_advance(now=now) == 0
    _judge_all(identity, lambda job: "WA", now=now)
    assert rejudge_progress(cancelled) == {"id": operation.pk, "state": RejudgeState.CANCELLED, "total": 60,
                                           "enqueued": 40, "judged": 40, "changed": 40, "skipped": 0}
    assert Submission.objects.filter(problem=problem, verdict="WA").count() == 40
    assert Submission.objects.filter(problem=problem, verdict="AC").count() == 20


def test_a_bulk_rejudge_pauses_while_its_pool_throttles_and_resumes_when_it_recovers(problem, wide, settings):
    _node, identity = wide
    now = timezone.now()
    operation = _judged_then_rejudged(problem, identity, 5, now=now)
    settings.KECE_THROTTLE_BACKLOG = {"*": 2}
    for _ in range(2):
        submit(UserFactory(), problem, now=now)
    assert rejudges_advance(now=now) == 0
    _judge_all(identity, lambda job: "AC", now=now)  # the pool drains
    assert rejudges_advance(now=now) == 5
    assert rejudge_progress(operation)["enqueued"] == 5


def test_a_node_selector_takes_what_the_node_judged_in_the_range_and_nothing_else(problem, settings):
    group = HostGroupFactory(total_slots=8)
    bad, bad_identity = make_node(pool="python", max_slots=4, host_group=group)
    _good, good_identity = make_node(pool="python", max_slots=4, host_group=group)
    # An hour ahead, so that even the first claim is not in the past: a lease is checked by
    # the clock once its rows are locked, and one taken an hour ago has ended.
    start = timezone.now() + timedelta(hours=1)
    before = submit(UserFactory(), problem, now=start - timedelta(hours=1))
    _judge_all(bad_identity, lambda job: "AC", now=start - timedelta(hours=1))
    by_bad = [submit(UserFactory(), problem, now=start) for _ in range(3)]
    _judge_all(bad_identity, lambda job: "AC", now=start + timedelta(minutes=1))
    by_good = submit(UserFactory(), problem, now=start)
    _judge_all(good_identity, lambda job: "AC", now=start + timedelta(minutes=1))
    after = submit(UserFactory(), problem, now=start + timedelta(hours=2))
    _judge_all(bad_identity, lambda job: "AC", now=start + timedelta(hours=2))

    operation = rejudge_request(selector={"nodeId": bad.pk, "since": start, "until": start + timedelta(hours=1)},
                                actor=None, now=start + timedelta(hours=3))
    chosen = set(operation.items.values_list("submission_id", flat=True))
    assert chosen == {s.pk for s in by_bad}
    assert not chosen & {before.pk, by_good.pk, after.pk}
    with pytest.raises(Invalid):
        rejudge_request(selector={"nodeId": 10**9, "since": start}, actor=None, now=start)


def test_a_submission_deleted_before_its_turn_is_skipped_and_counted_done(problem, wide):
    from judging.services.rejudge import submission_delete

    _node, identity = wide
    now = timezone.now()
    first, second = submit(UserFactory(), problem, now=now), submit(UserFactory(), problem, now=now)
    _judge_all(identity, lambda job: "AC", now=now)
    operation = rejudge_request(selector={"submissions": [{"type": "ALGO", "id": first.pk},
                                                          {"type": "ALGO", "id": second.pk}]}, actor=None, now=now)
    submission_delete(submission_type="ALGO", submission_id=second.pk, now=now)
    assert rejudges_advance(now=now) == 2
    _judge_all(identity, lambda job: "AC", now=now)
    rejudges_advance(now=now)
    operation.refresh_from_db()
    assert rejudge_progress(operation) == {"id": operation.pk, "state": RejudgeState.DONE, "total": 2,
                                           "enqueued": 1, "judged": 2, "changed": 0, "skipped": 1}


def test_a_listed_hidden_check_is_skipped_as_a_single_rejudge_refuses_it(problem, node_a):
    """A hidden canary's submission is the system account's: listed by id, the bulk rejudge
    skips it instead of turning it into ordinary, counted work any node could take."""
    from django.db import transaction

    from judging.services.rejudge import submission_rejudge
    from judging.system import system_user
    from kece.errors import NotFound
    from nodes.hidden_jobs import hidden_job_create

    node, identity = node_a
    now = timezone.now()
    submit(UserFactory(), problem, now=now)
    [original] = claim(identity, now=now)
    settle(identity, judged(original), now=now)
    with transaction.atomic():
        hidden = hidden_job_create(user_id=system_user().pk, problem_id=problem.pk, submission_type="ALGO",
                                   language="python", code="print(2)", snapshot=original.snapshot,
                                   manifest_id=original.manifest_id, pool="python",
                                   runtime_spec=original.runtime_spec, node_id=node.pk, now=now)
    with pytest.raises(NotFound):
        submission_rejudge(submission_type="ALGO", submission_id=hidden.submission_id, now=now)
    operation = rejudge_request(selector={"submissions": [{"type": "ALGO", "id": hidden.submission_id}]},
                                actor=None, now=now)
    rejudges_advance(now=now)
    assert Submission.objects.get(pk=hidden.submission_id).current_judge_job_id == hidden.pk, "no new generation"
    assert rejudge_progress(operation) | {"id": 0} == {
        "id": 0, "state": operation.state, "total": 1, "enqueued": 0, "skipped": 1, "judged": 1, "changed": 0}


def test_oi_work_awaiting_its_hand_in_is_left_to_the_hand_in(problem, unlimited_submits):
    """A rejudge of the problem during an OI exam judges none of its saved submissions: the
    hand-in judges the last one, at exam class, once."""
    from judging.models import ExamMode
    from judging.services.exams import exam_hand_in
    from judging.services.rejudge import submission_rejudge
    from kece.errors import NotFound
    from tests.factories import make_exam

    taker = UserFactory()
    exam = make_exam(problem, mode=ExamMode.OI, participants=[taker])
    now = timezone.now()
    first = submit(taker, problem, exam_id=exam.pk, now=now)
    last = submit(taker, problem, exam_id=exam.pk, now=now)
    operation = rejudge_request(selector={"problemId": problem.pk}, actor=None, now=now)
    assert operation.total == 0
    listed = rejudge_request(selector={"submissions": [{"type": "ALGO", "id": last.pk}]}, actor=None, now=now)
    rejudges_advance(now=now)
    assert rejudge_progress(listed)["skipped"] == 1
    with pytest.raises(NotFound, match="handed in"):
        submission_rejudge(submission_type="ALGO", submission_id=last.pk, now=now)
    assert JudgeJob.objects.count() == 0

    assert exam_hand_in(exam_id=exam.pk, user=taker, now=now).jobs == 1
    [job] = JudgeJob.objects.all()
    assert (job.submission_id, job.priority_class) == (last.pk, PriorityClass.EXAM)
    assert Submission.objects.get(pk=first.pk).current_judge_job_id is None


def test_work_still_waiting_or_running_is_replaced_in_its_own_class(problem, unlimited_submits):
    """A bulk rejudge during an ACM exam: the answer being judged and the one waiting are
    judged again at exam class, ahead of the practice queue, and still count against the
    participant's caps; the practice submission still waiting keeps its class too. Only
    work already done goes to the rejudge backlog."""
    from judging.pressure import exam_rank
    from tests.factories import make_exam

    taker, student = UserFactory(), UserFactory()
    node, identity = make_node(pool="python", max_slots=1)
    now = timezone.now()
    # Practice work from before the exam, which holds the problem for its participants only.
    done = submit(student, problem, now=now)
    [first_job] = claim(identity, now=now)
    assert settle(identity, judged(first_job), now=now) == "settled"
    practice = submit(student, problem, now=now)
    exam = make_exam(problem, mode="ACM", participants=[taker])
    running = submit(taker, problem, exam_id=exam.pk, now=now)
    [running_job] = claim(identity, now=now)
    assert running_job.submission_id == running.pk, "exam work first"
    waiting = submit(taker, problem, exam_id=exam.pk, now=now)
    assert exam_rank(pool="python", user_id=taker.pk) == 2

    operation = rejudge_request(selector={"problemId": problem.pk}, actor=None, now=now)
    assert operation.total == 4
    rejudges_advance(now=now)
    assert JudgeJob.objects.get(pk=running_job.pk).state == JobState.CANCELLED

    def new_class(submission):
        submission.refresh_from_db()
        job = JudgeJob.objects.get(pk=submission.current_judge_job_id)
        assert (job.state, job.generation) == (JobState.QUEUED, 2)
        return job.priority_class

    assert [new_class(s) for s in (running, waiting, practice, done)] == \
        [PriorityClass.EXAM, PriorityClass.EXAM, PriorityClass.PRACTICE, PriorityClass.REJUDGE]
    assert exam_rank(pool="python", user_id=taker.pk) == 2, "the participant's active exam work, counted"
