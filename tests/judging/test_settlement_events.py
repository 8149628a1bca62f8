from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import EventState, FirstAccepted, PracticeBest, ProblemResult, SettlementEvent
from judging.services import events
from judging.services.events import events_dispatch
from judging.services.rejudge import submission_delete, submission_rejudge
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import HostGroupFactory, UserFactory, make_node, make_practice, make_problem
from tests.judging.helpers import claim, judged, settle, submit


def _judge(identity, verdict="AC", score=None):
    [job] = claim(identity)
    assert settle(identity, judged(job, verdict=verdict, score=score)) == "settled"
    return job


@pytest.mark.django_db
def test_first_accepted_is_recorded_once_however_often_events_replay(student, problem, node_a):
    _, identity = node_a
    submit(student, problem)
    _judge(identity, "AC")
    submit(student, problem)
    _judge(identity, "AC")
    assert len(events_dispatch(now=timezone.now()).applied) == 2
    # Replay everything, as a crashed dispatcher might.
    SettlementEvent.objects.update(state=EventState.PENDING)
    events_dispatch(now=timezone.now())
    events_dispatch(now=timezone.now())
    assert FirstAccepted.objects.filter(user=student, problem=problem).count() == 1
    result = ProblemResult.objects.get(user=student, problem=problem)
    assert (result.best_score, result.best_verdict, result.attempts) == (100, "AC", 2)


@pytest.mark.django_db
def test_due_events_that_recompute_the_same_rows_run_their_handler_once(student, problem, node_a, monkeypatch):
    _, identity = node_a
    other = UserFactory()
    for user, verdict in ((student, "WA"), (student, "AC"), (other, "WA"), (student, "WA")):
        submit(user, problem)
        _judge(identity, verdict)
    runs = []
    real = events.HANDLERS["problem_stats"]
    monkeypatch.setitem(events.HANDLERS, "problem_stats", lambda payloads: (
        runs.extend(payload["userId"] for payload in payloads), real(payloads)))
    assert len(events_dispatch(now=timezone.now()).applied) == 4
    assert sorted(runs) == sorted([student.pk, other.pk]), "one recompute per student and problem"
    assert SettlementEvent.objects.exclude(state=EventState.DONE).count() == 0
    assert set(SettlementEvent.objects.values_list("attempts", flat=True)) == {1}
    assert SettlementEvent.objects.filter(applied_at__isnull=True).count() == 0
    result = ProblemResult.objects.get(user=student, problem=problem)
    assert (result.best_score, result.best_verdict, result.attempts) == (100, "AC", 3)
    assert ProblemResult.objects.get(user=other, problem=problem).best_verdict == "WA"


@pytest.mark.django_db
def test_a_rejudge_that_turns_the_only_ac_into_wa_revokes_first_accepted(student, problem, node_a):
    _, identity = node_a
    submission = submit(student, problem)
    _judge(identity, "AC")
    events_dispatch(now=timezone.now())
    assert FirstAccepted.objects.filter(user=student).exists()

    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    _judge(identity, "WA")
    events_dispatch(now=timezone.now())
    assert not FirstAccepted.objects.filter(user=student).exists()
    assert ProblemResult.objects.get(user=student).best_verdict == "WA"


@pytest.mark.django_db
def test_deleting_the_accepted_submission_revokes_first_accepted(student, problem, node_a):
    _, identity = node_a
    submission = submit(student, problem)
    _judge(identity, "AC")
    events_dispatch(now=timezone.now())
    submission_delete(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    events_dispatch(now=timezone.now())
    assert not FirstAccepted.objects.exists()
    assert ProblemResult.objects.get(user=student).attempts == 0


@pytest.mark.django_db
@pytest.mark.parametrize("finish_order", [("A", "B"), ("B", "A")])
def test_practice_best_score_does_not_depend_on_the_order_results_arrive(student, node_a, finish_order):
    _, identity = node_a
    problem = make_problem(languages=("python",), cases=2)  # weights 50 + 50
    practice = make_practice(problem)
    a = submit(student, problem, lesson_practice_id=practice.pk)
    b = submit(student, problem, lesson_practice_id=practice.pk)
    jobs = {job.submission_id: job for job in claim(identity, free_slots=2)}
    # A passes both cases (100), B only the first (50).
    results = {"A": judged(jobs[a.pk], verdict="AC"), "B": judged(jobs[b.pk], verdict="WA", passing=(1,))}
    for name in finish_order:
        settle(identity, results[name])
        events_dispatch(now=timezone.now())
    best = PracticeBest.objects.get(practice=practice, user=student, problem=problem)
    assert (best.best_score, best.best_submission_id) == (100, a.pk)
    # The binding is the submission's own: replaying the outbox recomputes the same row.
    SettlementEvent.objects.update(state=EventState.PENDING)
    events_dispatch(now=timezone.now())
    best = PracticeBest.objects.get(practice=practice, user=student, problem=problem)
    assert (best.best_score, best.best_submission_id) == (100, a.pk)
    assert PracticeBest.objects.count() == 1


@pytest.mark.django_db
def test_a_failing_handler_is_retried_with_backoff_then_marked_dead(student, problem, node_a, monkeypatch, settings):
    _, identity = node_a
    settings.KECE_EVENT_MAX_ATTEMPTS = 3
    submit(student, problem)
    _judge(identity)
    calls = []

    def broken(payloads):
        calls.append(payloads)
        raise RuntimeError("statistics store is down")

    monkeypatch.setitem(events.HANDLERS, "problem_stats", broken)
    now = timezone.now()
    assert len(events_dispatch(now=now).retried) == 1
    assert events_dispatch(now=now).retried == []  # not due yet: backoff
    event = SettlementEvent.objects.get()
    assert event.next_attempt_at > now and "statistics store is down" in event.last_error
    events_dispatch(now=now + timedelta(hours=1))
    report = events_dispatch(now=now + timedelta(hours=2))
    assert len(report.dead) == 1 and len(calls) == 3
    assert SettlementEvent.objects.get().state == EventState.DEAD


def _judge_all_then_dispatch_concurrently(identity, jobs: int, *, batch: int = 100) -> list:
    """Settle `jobs` queued jobs as AC, then dispatch their events from four threads; the
    event ids each applied, together."""
    for job in claim(identity, free_slots=jobs):
        settle(identity, judged(job, verdict="AC"))
    now = timezone.now()

    def dispatcher():
        # Events another dispatcher holds are skipped, not waited for: keep passing until
        # nothing is pending, as the periodic task would.
        applied = []
        while SettlementEvent.objects.filter(state=EventState.PENDING).exists():
            applied += events_dispatch(now=now, batch=batch).applied
        return applied

    results = run_concurrently([dispatcher for _ in range(4)])
    raise_first_error(results)
    return [event_id for result in results for event_id in result]


@pytest.mark.django_db
def test_a_failing_handler_holds_back_its_own_event_only(problem, node_a, monkeypatch):
    _, identity = node_a
    students = [UserFactory() for _ in range(3)]
    for user in students:
        submit(user, problem)
        _judge(identity, "AC")
    broken_user = students[1].pk
    real = events.HANDLERS["problem_stats"]

    def flaky(payloads):
        if any(payload["userId"] == broken_user for payload in payloads):
            raise RuntimeError("statistics store is down")
        real(payloads)

    monkeypatch.setitem(events.HANDLERS, "problem_stats", flaky)
    report = events_dispatch(now=timezone.now())
    assert (len(report.applied), len(report.retried)) == (2, 1)
    assert set(ProblemResult.objects.values_list("user_id", flat=True)) == {students[0].pk, students[2].pk}
    pending = SettlementEvent.objects.get(state=EventState.PENDING)
    assert pending.payload["userId"] == broken_user and "statistics store is down" in pending.last_error
    assert FirstAccepted.objects.count() == 2


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("unlimited_submits")
def test_concurrent_dispatchers_of_many_students_apply_each_event_once():
    """Dispatchers applying events in chunks lock their students' rows in one order: none
    waits on another for ever, and each student's statistics count every submission."""
    students = [UserFactory() for _ in range(12)]
    problems = [make_problem(languages=("python",)) for _ in range(2)]
    _, identity = make_node(pool="python", max_slots=48, host_group=HostGroupFactory(total_slots=48))
    for user in students:
        for problem in problems:
            submit(user, problem)
            submit(user, problem)
    applied = _judge_all_then_dispatch_concurrently(identity, 48, batch=10)
    assert len(applied) == len(set(applied)) == 48
    assert set(ProblemResult.objects.values_list("attempts", flat=True)) == {2}
    assert ProblemResult.objects.count() == FirstAccepted.objects.count() == 24


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("unlimited_submits")
def test_concurrent_dispatchers_apply_each_event_once():
    student = UserFactory()
    problem = make_problem(languages=("python",))
    _, identity = make_node(pool="python", max_slots=40, host_group=HostGroupFactory(total_slots=40))
    for _ in range(40):
        submit(student, problem)
    applied = _judge_all_then_dispatch_concurrently(identity, 40)
    assert len(applied) == len(set(applied)) == 40
    assert set(SettlementEvent.objects.values_list("attempts", flat=True)) == {1}
    assert FirstAccepted.objects.count() == 1
    assert ProblemResult.objects.get().attempts == 40


@pytest.mark.django_db
def test_a_handler_whose_last_write_fails_has_the_failure_recorded_on_its_own_event(student, problem, node_a,
                                                                                     monkeypatch):
    """A handler's writes are sent with the database's next statement: its failure must
    still be caught with that handler, not with the next kind's events."""
    from kece.rows import insert_values

    _, identity = node_a
    submit(student, problem, lesson_practice_id=make_practice(problem).pk)
    job = _judge(identity)
    called = []

    def wrapped(kind, real):
        def handler(payloads):
            real(payloads)
            called.append(kind)
            if len(called) == 1:  # the first kind's last write: a second copy of its own event
                now = timezone.now()
                insert_values(SettlementEvent, [{"job_id": job.pk, "event_type": kind, "payload": {},
                                                 "next_attempt_at": now, "created_at": now}])
        return handler

    for kind, real in list(events.HANDLERS.items()):
        monkeypatch.setitem(events.HANDLERS, kind, wrapped(kind, real))
    events_dispatch(now=timezone.now())
    failing = called[0]
    states = {event.event_type: (event.state, bool(event.last_error))
              for event in SettlementEvent.objects.filter(job_id=job.pk)}
    assert len(states) == 2
    assert states.pop(failing) == (EventState.PENDING, True)
    assert list(states.values()) == [(EventState.DONE, False)]
