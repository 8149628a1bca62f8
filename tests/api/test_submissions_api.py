"""The user API: submit code, then watch the submission's status as the user sees it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import DbSubmission, JobState, JudgeJob, Submission
from judging.services.settle import job_settle
from nodes.models import JudgeNode
from tests.api.helpers import (
    ADMIN, INTERNAL, error_of, make_admin, node_client, person, ready_node, send, token_client,
)
from tests.factories import make_node, make_practice, make_problem
from tests.judging.helpers import claim, infra_error, judged, settle, submit

pytestmark = pytest.mark.django_db

SUBMIT = "/api/v1/submissions"
STATUS_KEYS = {"submissionType", "submissionId", "status", "waitReason", "verdict", "score", "timeMs", "memoryKb",
               "cases"}


@pytest.fixture
def owner(db):
    return person("owner")


@pytest.fixture
def user_api(owner):
    return token_client(owner)


@pytest.fixture
def algo(db):
    return make_problem(languages=("python", "cpp"), cases=2)


@pytest.fixture
def sql(db):
    return make_problem(kind="SQL")


def rows():
    return Submission.objects.count(), DbSubmission.objects.count(), JudgeJob.objects.count()


def status_of(client, submission_type, submission_id) -> dict:
    response = client.get(f"{SUBMIT}/{submission_type}/{submission_id}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == STATUS_KEYS
    return body


# --- submit ------------------------------------------------------------------------------------

def test_a_submission_is_accepted_as_pending_with_its_first_job_queued(user_api, owner, algo):
    response = send(user_api, "POST", SUBMIT, {"problemId": algo.pk, "language": "cpp", "code": "int main(){}"})
    assert response.status_code == 202
    body = response.json()
    assert body == {"submissionType": "ALGO", "submissionId": body["submissionId"], "status": "PENDING"}
    submission = Submission.objects.get(pk=body["submissionId"])
    assert (submission.user, submission.problem, submission.language, submission.code) == (
        owner, algo, "cpp", "int main(){}")
    job = JudgeJob.objects.get(pk=submission.current_judge_job_id)
    assert (job.submission_type, job.submission_id, job.generation, job.state, job.pool, job.runtime_spec) == (
        "ALGO", submission.pk, 1, JobState.QUEUED, "cpp", "cpp-r1")


def test_the_job_is_judged_against_the_problems_current_manifest(user_api, algo):
    old = algo.current_manifest
    newer = make_problem(languages=("cpp",), cases=3).current_manifest
    newer.problem, newer.version = algo, old.version + 1
    newer.save()
    algo.current_manifest = newer
    algo.save()
    response = send(user_api, "POST", SUBMIT, {"problemId": algo.pk, "language": "cpp", "code": "int main(){}"})
    assert response.status_code == 202
    job = JudgeJob.objects.get(submission_id=response.json()["submissionId"], submission_type="ALGO")
    assert job.manifest_id == newer.pk
    assert (job.snapshot["problemId"], job.snapshot["problemSlug"], job.snapshot["manifestVersion"]) == (
        algo.pk, algo.slug, old.version + 1)
    assert [case["ordinal"] for case in job.snapshot["cases"]] == [1, 2, 3]


@pytest.mark.parametrize("state", ["missing", "deleted", "canary", "no manifest"])
def test_a_problem_that_takes_no_submissions_is_unknown_and_nothing_is_written(user_api, algo, state):
    problem_id = algo.pk
    if state == "missing":
        problem_id = algo.pk + 1000
    elif state == "deleted":
        algo.deleted_at = timezone.now()
    elif state == "canary":
        algo.is_canary = True
    else:
        algo.current_manifest = None
    algo.save()
    before = rows()
    response = send(user_api, "POST", SUBMIT, {"problemId": problem_id, "language": "cpp", "code": "int main(){}"})
    assert response.status_code == 400
    assert response.json()["fields"]["problemId"] == ["unknown problem"]
    assert rows() == before


def test_a_sql_submission_goes_to_the_mysql_pool_as_type_sql(user_api, sql):
    response = send(user_api, "POST", SUBMIT, {"problemId": sql.pk, "language": "mysql", "code": "SELECT 1;"})
    assert response.status_code == 202
    assert (response.json()["submissionType"], response.json()["status"]) == ("SQL", "PENDING")
    submission = DbSubmission.objects.get(pk=response.json()["submissionId"])
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).pool == "mysql"
    assert not Submission.objects.exists()


def test_a_submission_may_name_a_lesson_practice_that_holds_the_problem(user_api, algo):
    practice = make_practice(algo)
    response = send(user_api, "POST", SUBMIT, {"problemId": algo.pk, "language": "python", "code": "print(1)",
                                               "lessonPracticeId": practice.pk})
    assert response.status_code == 202
    submission = Submission.objects.get(pk=response.json()["submissionId"])
    assert submission.lesson_practice == practice
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).lesson_practice == practice


@pytest.mark.parametrize("problem_name, language", [
    ("algo", "java"),        # a pool, but not one this problem accepts
    ("algo", "mysql"),       # the SQL pool for an ALGO problem
    ("algo", "Python"),      # pools are named in lower case
    ("algo", "c++"),
    ("algo", "brainfuck"),
    ("algo", " python"),
    ("sql", "python"),       # an ALGO pool for a SQL problem
    ("sql", "cpp"),
    ("sql", "MySQL"),
    ("sql", "sql"),
])
def test_a_language_the_problem_does_not_accept_is_refused_and_nothing_is_written(
        user_api, algo, sql, problem_name, language):
    problem = {"algo": algo, "sql": sql}[problem_name]
    before = rows()
    response = send(user_api, "POST", SUBMIT, {"problemId": problem.pk, "language": language, "code": "x = 1"})
    assert error_of(response) == (400, "invalid")
    assert "language" in response.json()["fields"]
    assert rows() == before


@pytest.mark.parametrize("body, field", [
    ({"problemId": 987654, "language": "python", "code": "print(1)"}, "problemId"),
    ({"problemId": "{algo}", "language": "python", "code": "   \n"}, "code"),
    ({"problemId": "{algo}", "language": "python", "code": ""}, "code"),
    ({"problemId": "{algo}", "language": "python", "code": "#" * (256 * 1024 + 1)}, "code"),
    ({"problemId": "{algo}", "language": "python"}, "code"),
    ({"language": "python", "code": "print(1)"}, "problemId"),
    ({"problemId": "{algo}", "code": "print(1)"}, "language"),
    ({"problemId": "{algo}", "language": "python", "code": "print(1)", "lessonPracticeId": 987654},
     "lessonPracticeId"),
    ({"problemId": "abc", "language": "python", "code": "print(1)"}, "problemId"),
    ({"problemId": "{algo}", "language": ["python"], "code": "print(1)"}, "language"),
])
def test_an_invalid_submission_is_refused_with_the_field_named(user_api, algo, body, field):
    body = {k: (algo.pk if v == "{algo}" else v) for k, v in body.items()}
    before = rows()
    response = send(user_api, "POST", SUBMIT, body)
    assert error_of(response) == (400, "invalid")
    assert field in response.json()["fields"]
    assert rows() == before


def test_a_practice_that_does_not_hold_the_problem_is_refused(user_api, algo):
    practice = make_practice(make_problem())
    before = rows()
    response = send(user_api, "POST", SUBMIT, {"problemId": algo.pk, "language": "python", "code": "print(1)",
                                               "lessonPracticeId": practice.pk})
    assert error_of(response) == (400, "invalid") and "lessonPracticeId" in response.json()["fields"]
    assert rows() == before


@pytest.mark.parametrize("raw", [b"{not json", b"[]", b'"print(1)"', b"null"])
def test_a_body_that_is_not_a_json_object_is_invalid(user_api, algo, raw):
    before = rows()
    response = user_api.post(SUBMIT, data=raw, content_type="application/json")
    assert error_of(response) == (400, "invalid")
    assert rows() == before


def test_a_body_over_one_mebibyte_is_too_large(user_api, algo):
    before = rows()
    response = send(user_api, "POST", SUBMIT, {"problemId": algo.pk, "language": "python",
                                               "code": "#" * (1024 * 1024 + 1)})
    assert error_of(response) == (413, "too_large")
    assert rows() == before


def test_a_form_encoded_body_is_invalid_not_an_error(user_api, algo):
    response = user_api.post(SUBMIT, {"problemId": algo.pk, "language": "python", "code": "print(1)"})
    assert error_of(response) == (400, "invalid")


# --- status ------------------------------------------------------------------------------------

def test_a_waiting_submission_says_why_it_waits(user_api, owner, algo):
    submission = submit(owner, algo)
    body = status_of(user_api, "ALGO", submission.pk)
    assert body == {"submissionType": "ALGO", "submissionId": submission.pk, "status": "PENDING",
                    "waitReason": "no_node", "verdict": None, "score": None, "timeMs": None, "memoryKb": None,
                    "cases": []}
    make_node(pool="cpp")  # a node of another pool changes nothing
    assert status_of(user_api, "ALGO", submission.pk)["waitReason"] == "no_node"
    make_node(pool="python", desired_state="DRAINING")  # neither does a draining one
    assert status_of(user_api, "ALGO", submission.pk)["waitReason"] == "no_node"
    ready_node(pool="python")
    assert (status_of(user_api, "ALGO", submission.pk)["status"],
            status_of(user_api, "ALGO", submission.pk)["waitReason"]) == ("PENDING", "queued")


def test_a_node_that_runs_another_runtime_spec_is_no_node_for_the_job(user_api, owner, algo):
    submission = submit(owner, algo)
    node, identity = ready_node(pool="python")
    JudgeNode.objects.filter(pk=node.pk).update(runtime_spec="python-r2", self_check_runtime_spec="python-r2")
    assert claim(identity) == []  # it can never be given this job
    body = status_of(user_api, "ALGO", submission.pk)
    assert (body["status"], body["waitReason"]) == ("PENDING", "no_node")


def test_a_running_submission_shows_the_phase_its_node_reports(user_api, owner, algo):
    node, identity = ready_node(pool="python")
    submission = submit(owner, algo)
    [job] = claim(identity)
    running = status_of(user_api, "ALGO", submission.pk)
    assert (running["status"], running["waitReason"], running["verdict"]) == ("COMPILING", None, None)

    agent = node_client(node, session=identity.session_epoch)
    for phase in ("COMPILING", "JUDGING"):
        renewed = send(agent, "POST", INTERNAL + "jobs/renew",
                       {"leases": [{"jobId": job.pk, "leaseEpoch": job.lease_epoch,
                                    "progress": {"phase": phase, "testcase": 1}}]})
        assert renewed.json()["leases"][0]["ok"] is True
        assert status_of(user_api, "ALGO", submission.pk)["status"] == phase


def test_a_judged_submission_shows_its_verdict_score_and_cases(user_api, owner, algo):
    node, identity = ready_node(pool="python")
    submission = submit(owner, algo)
    [job] = claim(identity)
    assert settle(identity, judged(job, verdict="WA", passing=[1])) == "settled"
    body = status_of(user_api, "ALGO", submission.pk)
    assert body == {
        "submissionType": "ALGO", "submissionId": submission.pk, "status": "WA", "waitReason": None,
        "verdict": "WA", "score": 50, "timeMs": 10, "memoryKb": 1024,
        "cases": [{"ordinal": 1, "verdict": "AC", "timeMs": 10, "memoryKb": 1024, "score": 50},
                  {"ordinal": 2, "verdict": "WA", "timeMs": 10, "memoryKb": 1024, "score": 0}],
    }


def test_an_infrastructure_failure_waits_in_backoff_then_ends_as_a_system_error(user_api, owner, algo, settings):
    settings.KECE_MAX_ATTEMPTS = 2
    node, identity = ready_node(pool="python")
    submission = submit(owner, algo)
    now = timezone.now()
    [job] = claim(identity, now=now)
    assert job_settle(identity=identity, request=infra_error(job), now=now) == "requeued"
    body = status_of(user_api, "ALGO", submission.pk)
    assert (body["status"], body["waitReason"], body["verdict"]) == ("PENDING", "backoff", None)

    later = timezone.now() + timedelta(minutes=2)
    [again] = claim(identity, now=later)
    assert again.pk == job.pk and again.attempts == 2
    assert job_settle(identity=identity, request=infra_error(again), now=later) == "failed"
    body = status_of(user_api, "ALGO", submission.pk)
    assert (body["status"], body["waitReason"], body["verdict"], body["score"], body["cases"]) == (
        "SYSTEM_ERROR", None, None, None, [])


def test_a_deleted_submission_is_cancelled_for_its_owner(user_api, owner, algo):
    submission = submit(owner, algo)
    assert send(token_client(make_admin()), "DELETE", ADMIN + f"submissions/ALGO/{submission.pk}").status_code == 204
    body = status_of(user_api, "ALGO", submission.pk)
    assert (body["status"], body["waitReason"], body["verdict"]) == ("CANCELLED", None, None)


def test_a_deleted_judged_submission_is_cancelled_not_its_old_verdict(user_api, owner, algo):
    node, identity = ready_node(pool="python")
    submission = submit(owner, algo)
    [job] = claim(identity)
    settle(identity, judged(job))
    assert send(token_client(make_admin()), "DELETE", ADMIN + f"submissions/ALGO/{submission.pk}").status_code == 204
    assert status_of(user_api, "ALGO", submission.pk)["status"] == "CANCELLED"


def test_a_rejudged_submission_is_pending_again(user_api, owner, algo):
    node, identity = ready_node(pool="python")
    submission = submit(owner, algo)
    [job] = claim(identity)
    settle(identity, judged(job))
    assert status_of(user_api, "ALGO", submission.pk)["status"] == "AC"
    send(token_client(make_admin()), "POST", ADMIN + f"submissions/ALGO/{submission.pk}/rejudge")
    body = status_of(user_api, "ALGO", submission.pk)
    assert (body["status"], body["waitReason"]) == ("PENDING", "queued")


def test_a_sql_and_a_code_submission_with_the_same_id_are_told_apart_by_type(user_api, owner, algo, sql):
    node, identity = ready_node(pool="python")
    code = submit(owner, algo)
    query = submit(owner, sql, language="mysql", code="SELECT x FROM t;")
    # Give the SQL submission the code submission's number: the two tables collide on purpose.
    DbSubmission.objects.filter(pk=query.pk).update(id=code.pk)
    JudgeJob.objects.filter(pk=query.current_judge_job_id).update(submission_id=code.pk)
    [job] = claim(identity)
    assert job.submission_ref == ("ALGO", code.pk)
    settle(identity, judged(job))

    as_code = status_of(user_api, "ALGO", code.pk)
    as_sql = status_of(user_api, "SQL", code.pk)
    assert (as_code["submissionType"], as_code["status"]) == ("ALGO", "AC")
    assert (as_sql["submissionType"], as_sql["status"], as_sql["waitReason"]) == ("SQL", "PENDING", "no_node")

    admin = token_client(make_admin())
    assert send(admin, "DELETE", ADMIN + f"submissions/SQL/{code.pk}").status_code == 204
    assert status_of(user_api, "SQL", code.pk)["status"] == "CANCELLED"
    assert status_of(user_api, "ALGO", code.pk)["status"] == "AC"
    assert send(admin, "POST", ADMIN + f"submissions/ALGO/{code.pk}/rejudge").json() == {"generation": 2}
    assert JudgeJob.objects.get(pk=query.current_judge_job_id).state == JobState.CANCELLED


@pytest.mark.parametrize("path", ["algo/{id}", "CODE/{id}", "ALGO/{missing}", "SQL/{id}", "ALGO/0", "ALGO/-1",
                                  "ALGO/{id}/"])
def test_an_unknown_type_or_id_is_not_found(user_api, owner, algo, path):
    submission = submit(owner, algo)
    url = f"{SUBMIT}/" + path.format(id=submission.pk, missing=submission.pk + 1000)
    assert error_of(user_api.get(url)) == (404, "not_found")
