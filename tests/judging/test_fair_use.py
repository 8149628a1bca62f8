"""Fair use: one account's limits refuse that account, not the pool; exam participants take turns."""

from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone

from judging.models import JobState, JudgeJob, PriorityClass, Submission
from judging.pressure import pool_throttling
from judging.services.exams import exam_hand_in
from kece.errors import Throttled
from nodes.models import JudgeNode
from tests.api.helpers import person, token_client
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import HostGroupFactory, UserFactory, make_exam, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

SUBMIT = "/api/v1/submissions"
OWN_LIMIT = "this limit is yours alone, not the judges'"


@pytest.fixture
def python(db):
    return make_problem(languages=("python",))


def _body(problem, **extra):
    return {"problemId": problem.pk, "language": "python", "code": "print(1)", **extra}


def _active(user):
    return JudgeJob.objects.filter(user_id=user.pk, state__in=JobState.ACTIVE).count()


# --- practice -----------------------------------------------------------------------------------

@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_one_account_submitting_in_a_loop_gets_its_own_429s_while_others_still_submit(python, settings):
    """The lock-out, with the default settings: one account fires 2,000 submissions from four
    concurrent clients while another student submits; the flood is refused for its own
    account, the other student is accepted every time and the pool is never throttled."""
    flooder, other = UserFactory(), UserFactory()
    cap = settings.KECE_USER_ACTIVE_MAX

    def flood():
        accepted = refused = 0
        for _ in range(500):
            try:
                submit(flooder, python)
                accepted += 1
            except Throttled as refusal:
                assert OWN_LIMIT in refusal.detail and refusal.retry_after >= 1
                refused += 1
        return accepted, refused

    def student_meanwhile():
        return [submit(other, python).pk for _ in range(3)]

    results = run_concurrently([flood, flood, flood, flood, student_meanwhile])
    raise_first_error(results)
    assert len(results[4]) == 3
    accepted = sum(r[0] for r in results[:4])
    assert sum(r[1] for r in results[:4]) == 2000 - accepted
    # The cap is read before the submit's transaction: concurrent submits of one account may
    # pass it together, at most one per client beyond it.
    assert cap <= accepted <= cap + 3 and accepted == _active(flooder)
    assert not pool_throttling("python", now=timezone.now())
    assert submit(other, python)  # and after the whole flood


@pytest.mark.django_db
def test_practice_beyond_fair_share_does_not_count_toward_the_pools_thresholds(python, settings):
    settings.KECE_USER_INFLIGHT = 4
    settings.KECE_THROTTLE_BACKLOG = {"*": 10}
    settings.KECE_THROTTLE_WAIT_S = {"*": 60}
    start = timezone.now()
    burst = UserFactory()
    for index in range(settings.KECE_USER_ACTIVE_MAX):
        submit(burst, python, now=start + timedelta(milliseconds=index))
    assert not pool_throttling("python", now=start)
    # Its share runs; the rest waits past the head-of-line threshold behind it.
    node, identity = make_node(pool="python", max_slots=4, host_group=HostGroupFactory(total_slots=4))
    assert len(claim(identity, free_slots=4, now=start + timedelta(seconds=1))) == 4
    later = start + timedelta(seconds=61)
    # Its heartbeats go on while it judges: a busy judge, not a missing one.
    JudgeNode.objects.filter(pk=node.pk).update(last_heartbeat_at=later)
    assert not pool_throttling("python", now=later)
    assert submit(UserFactory(), python, now=later)
    # Work within share still counts: nine more students fill the backlog to its threshold.
    for _ in range(9):
        submit(UserFactory(), python, now=later)
    with pytest.raises(Throttled, match="judges are busy"):
        submit(UserFactory(), python, now=later)


@pytest.mark.django_db
def test_a_user_at_their_active_cap_is_refused_through_the_api_and_no_one_else_is(python, settings):
    settings.KECE_USER_ACTIVE_MAX = 3
    settings.KECE_THROTTLE_RETRY_S = 20
    alice, bob = token_client(person("alice")), token_client(person("bob"))
    for _ in range(3):
        assert alice.post(SUBMIT, _body(python), content_type="application/json").status_code == 202
    before = Submission.objects.count()
    response = alice.post(SUBMIT, _body(python), content_type="application/json")
    assert response.status_code == 429 and response["Retry-After"] == "20"
    assert response.json() == {"error": "throttled", "detail": (
        "You already have 3 submissions waiting for the Python judges, the most one person may have at a time; "
        "this limit is yours alone, not the judges'. Your code is kept here; try again in 20 s.")}
    assert Submission.objects.count() == before
    assert bob.post(SUBMIT, _body(python), content_type="application/json").status_code == 202
    # Another pool is another queue.
    cpp = make_problem(languages=("cpp",))
    assert alice.post(SUBMIT, {"problemId": cpp.pk, "language": "cpp", "code": "int main(){}"},
                      content_type="application/json").status_code == 202
    # Once one of hers is judged she may submit there again.
    node = make_node(pool="python")[1]
    [job] = claim(node)
    assert settle(node, judged(job)) == "settled"
    assert alice.post(SUBMIT, _body(python), content_type="application/json").status_code == 202


@pytest.mark.django_db
def test_a_user_beyond_their_rate_is_refused_until_retry_after_has_passed(python, settings):
    settings.KECE_USER_SUBMIT_RATE = (3, 60)
    start = timezone.now().replace(second=10, microsecond=0)
    user = UserFactory()
    for index in range(3):
        submit(user, python, now=start + timedelta(seconds=index))
    with pytest.raises(Throttled) as refused:
        submit(user, python, now=start + timedelta(seconds=3))
    assert "You have sent 3 submissions within 60 s" in refused.value.detail and OWN_LIMIT in refused.value.detail
    assert submit(UserFactory(), python, now=start + timedelta(seconds=3))  # others are not concerned
    # Retry-After is the truth: a second earlier is still too early (and is not counted), then it fits.
    wait = refused.value.retry_after
    assert wait > 1
    with pytest.raises(Throttled):
        submit(user, python, now=start + timedelta(seconds=3 + wait - 1))
    assert submit(user, python, now=start + timedelta(seconds=3 + wait))
    assert Submission.objects.filter(user=user).count() == 4


@pytest.mark.django_db
def test_a_submit_rolled_back_after_its_rate_was_taken_costs_no_rate(python, settings):
    """A retry whose idempotency key a twin committed first is rolled back: the user's window
    holds the submissions that exist, not the attempts."""
    settings.KECE_USER_SUBMIT_RATE = (2, 60)
    now = timezone.now().replace(second=10, microsecond=0)
    user = UserFactory()

    def twin_committed_first(submission):
        raise IntegrityError("Duplicate entry for key 'judge_idempotency_key_user_key'")

    for _ in range(3):
        with pytest.raises(IntegrityError):
            submit(user, python, now=now, after_insert=twin_committed_first)
    submit(user, python, now=now)
    submit(user, python, now=now)
    with pytest.raises(Throttled) as refused:
        submit(user, python, now=now)
    assert "You have sent 2 submissions within 60 s" in refused.value.detail
    assert Submission.objects.filter(user=user).count() == 2


def test_the_problem_page_keeps_the_code_and_says_the_limit_is_the_students_own(python, settings, client):
    settings.KECE_USER_SUBMIT_RATE = (1, 60)
    student = UserFactory()
    client.force_login(student)
    code = "print('my answer')"
    assert client.post(f"/problems/{python.pk}", {"language": "python", "code": code}).status_code == 302
    response = client.post(f"/problems/{python.pk}", {"language": "python", "code": code})
    assert response.status_code == 429 and int(response["Retry-After"]) >= 1
    page = response.content.decode()
    assert "my answer" in page and "You have sent 1 submissions within 60 s" in page and "busy" not in page
    page = client.post(f"/problems/{python.pk}", {"language": "python", "code": code},
                       HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "my answer" in page and "只是你自己的限制" in page


# --- exams --------------------------------------------------------------------------------------

@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_one_participants_sixty_answers_do_not_make_anothers_one_wait(python, settings):
    settings.KECE_EXAM_ACTIVE_MAX = 100
    settings.KECE_EXAM_SUBMIT_RATE = None
    a, b = UserFactory(), UserFactory()
    exam = make_exam(python, mode="ACM", participants=[a, b])
    start = timezone.now()
    # A's sixty from six concurrent clients; B's one after all of them.
    results = run_concurrently([lambda: [submit(a, python, exam_id=exam.pk, now=start) for _ in range(10)]] * 6)
    raise_first_error(results)
    late = submit(b, python, exam_id=exam.pk, now=start + timedelta(seconds=1))
    node = make_node(pool="python", max_slots=1, host_group=HostGroupFactory(total_slots=1))[1]
    order = []
    at = start + timedelta(seconds=2)
    while len(order) < 3:
        [job] = claim(node, now=at)
        order.append(job.user_id)
        assert settle(node, judged(job), now=at) == "settled"
    assert b.pk in order, order
    assert JudgeJob.objects.get(pk=late.current_judge_job_id).priority_class == PriorityClass.EXAM


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_participant_beyond_the_active_bound_gets_429_while_another_is_accepted(python, settings):
    settings.KECE_EXAM_ACTIVE_MAX = 3
    settings.KECE_THROTTLE_BACKLOG = {"*": 1}  # the pool is under pressure: exam work is still taken
    a, b = person("alice"), person("bob")
    submit(UserFactory(), python)
    exam = make_exam(python, mode="ACM", participants=[a, b])
    results = run_concurrently([lambda: submit(a, python, exam_id=exam.pk)] * 8)
    refusals = [r for r in results if isinstance(r, Throttled)]
    accepted = [r for r in results if isinstance(r, Submission)]
    assert (len(accepted), len(refusals)) == (3, 5), results  # exact: counted under the participant's lock
    assert _active(a) == 3
    response = token_client(a).post(SUBMIT, _body(python, examId=exam.pk), content_type="application/json")
    assert response.status_code == 429 and response["Retry-After"] == str(settings.KECE_THROTTLE_RETRY_S)
    assert OWN_LIMIT in response.json()["detail"]
    assert token_client(b).post(SUBMIT, _body(python, examId=exam.pk), content_type="application/json"
                                ).status_code == 202


@pytest.mark.django_db
def test_a_participant_beyond_the_exam_rate_is_refused_on_the_page_and_another_is_not(python, settings, client):
    settings.KECE_EXAM_SUBMIT_RATE = (2, 60)
    a, b = UserFactory(), UserFactory()
    exam = make_exam(python, mode="ACM", participants=[a, b])
    client.force_login(a)
    for _ in range(2):
        assert client.post(f"/problems/{python.pk}?exam={exam.pk}", {"language": "python", "code": "print(2)"}
                           ).status_code == 302
    response = client.post(f"/problems/{python.pk}?exam={exam.pk}", {"language": "python", "code": "print(3)"})
    assert response.status_code == 429 and int(response["Retry-After"]) >= 1
    page = response.content.decode()
    assert "You have sent 2 submissions within 60 s" in page and "print(3)" in page
    assert "This submission goes into the exam." in page
    assert submit(b, python, exam_id=exam.pk)


@pytest.mark.django_db
def test_a_participants_submits_refused_for_their_active_jobs_cost_no_exam_rate(python, settings):
    settings.KECE_EXAM_ACTIVE_MAX = 1
    settings.KECE_EXAM_SUBMIT_RATE = (3, 60)
    now = timezone.now().replace(second=10, microsecond=0)
    participant = UserFactory()
    exam = make_exam(python, mode="ACM", participants=[participant])
    submit(participant, python, exam_id=exam.pk, now=now)
    for _ in range(2):  # while the first waits for a judge
        with pytest.raises(Throttled) as refused:
            submit(participant, python, exam_id=exam.pk, now=now)
        assert "You already have 1 submissions waiting" in refused.value.detail
    node = make_node(pool="python", max_slots=1, host_group=HostGroupFactory(total_slots=1))[1]
    [job] = claim(node, now=now)
    assert settle(node, judged(job), now=now) == "settled"
    # One submission so far within the minute, not three.
    assert submit(participant, python, exam_id=exam.pk, now=now + timedelta(seconds=1))


@pytest.mark.django_db
def test_an_oi_hand_in_is_never_refused_whatever_the_bounds_and_its_jobs_take_turns(python, settings):
    settings.KECE_EXAM_ACTIVE_MAX = 1
    settings.KECE_THROTTLE_BACKLOG = {"*": 1}
    problems = [python, make_problem(languages=("python",)), make_problem(languages=("python",))]
    a, b = UserFactory(), UserFactory()
    exam = make_exam(*problems, mode="OI", participants=[a, b])
    now = timezone.now()
    for problem in problems:
        submit(a, problem, exam_id=exam.pk, now=now)
    submit(b, python, exam_id=exam.pk, now=now)
    settings.KECE_EXAM_SUBMIT_RATE = (1, 60)  # A has sent more than that within the window
    assert exam_hand_in(exam_id=exam.pk, user=a, now=now).jobs == 3
    assert exam_hand_in(exam_id=exam.pk, user=b, now=now + timedelta(seconds=1)).jobs == 1
    assert _active(a) == 3
    node = make_node(pool="python", max_slots=1, host_group=HostGroupFactory(total_slots=1))[1]
    at = now + timedelta(seconds=2)
    [first] = claim(node, now=at)
    assert settle(node, judged(first), now=at) == "settled"
    [second] = claim(node, now=at)
    assert [first.user_id, second.user_id] == [a.pk, b.pk]


@pytest.mark.django_db
def test_with_the_cache_down_the_rates_refuse_no_one_and_the_active_caps_still_hold(python, settings, monkeypatch):
    class Down:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise ConnectionError("the cache is down")
            return fail

    monkeypatch.setattr("judging.rates.cache", Down())
    settings.KECE_USER_SUBMIT_RATE = settings.KECE_EXAM_SUBMIT_RATE = (1, 60)
    settings.KECE_USER_ACTIVE_MAX = 2
    user = UserFactory()
    exam = make_exam(make_problem(languages=("python",)), mode="ACM", participants=[user])
    exam_problem = exam.problems.get().problem
    submit(user, exam_problem, exam_id=exam.pk)
    submit(user, exam_problem, exam_id=exam.pk)
    submit(user, python)  # practice: not a problem the exam keeps
    submit(user, python)
    with pytest.raises(Throttled, match="You already have 2 submissions"):
        submit(user, python)
