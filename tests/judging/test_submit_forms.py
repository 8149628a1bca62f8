"""The site's own submit form carries a key made when it is rendered, and its POST goes
through the same idempotency service as the API: the same form sent twice is one submission."""

import re

import pytest
from django.test import Client

from judging.models import IdempotencyKey, JudgeJob, Submission
from tests.api.helpers import person
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import make_exam, make_problem

KEY = re.compile(r'name="idempotency_key" value="([^"]+)"')


def _rendered_form(client, path) -> dict:
    """The fields a browser would send from the form as rendered at `path`."""
    page = client.get(path).content.decode()
    fields = {"language": "python", "code": "print(1)", "idempotency_key": KEY.search(page).group(1)}
    if match := re.search(r'name="exam" value="(\d+)"', page):
        fields["exam"] = match.group(1)
    return fields


@pytest.fixture
def signed_in(client, student):
    client.force_login(student)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("into", ["practice", "ACM", "OI"])
def test_the_same_form_posted_twice_is_one_submission_and_lands_on_it(signed_in, student, problem, into):
    query = "" if into == "practice" else f"?exam={make_exam(problem, mode=into, participants=[student]).pk}"
    form = _rendered_form(signed_in, f"/problems/{problem.pk}{query}")
    first = signed_in.post(f"/problems/{problem.pk}", form)
    again = signed_in.post(f"/problems/{problem.pk}", form)
    submission = Submission.objects.get()
    assert first.status_code == again.status_code == 302
    assert first["Location"] == again["Location"] == f"/submissions/ALGO/{submission.pk}"
    assert JudgeJob.objects.count() == (0 if into == "OI" else 1)

    another = _rendered_form(signed_in, f"/problems/{problem.pk}{query}")
    assert another["idempotency_key"] != form["idempotency_key"], "each render makes a new key"
    assert signed_in.post(f"/problems/{problem.pk}", another)["Location"] != first["Location"]
    assert Submission.objects.count() == 2


@pytest.mark.django_db
def test_the_same_form_sent_again_with_other_code_keeps_that_code_and_offers_a_new_key(signed_in, problem):
    form = _rendered_form(signed_in, f"/problems/{problem.pk}")
    signed_in.post(f"/problems/{problem.pk}", form)
    refused = signed_in.post(f"/problems/{problem.pk}", form | {"code": "print(2)"})
    page = refused.content.decode()
    assert refused.status_code == 409 and "already been sent with other code" in page and "print(2)" in page
    assert Submission.objects.count() == 1
    fresh = KEY.search(page).group(1)
    assert fresh != form["idempotency_key"]
    assert signed_in.post(f"/problems/{problem.pk}", form | {"code": "print(2)", "idempotency_key": fresh}
                          ).status_code == 302
    assert sorted(Submission.objects.values_list("code", flat=True)) == ["print(1)", "print(2)"]


@pytest.mark.django_db
def test_a_form_key_the_api_would_refuse_is_refused_in_words(signed_in, problem):
    form = _rendered_form(signed_in, f"/problems/{problem.pk}")
    refused = signed_in.post(f"/problems/{problem.pk}", form | {"idempotency_key": "x" * 129})
    assert refused.status_code == 400 and "Your code was not submitted" in refused.content.decode()
    assert not Submission.objects.exists()


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_double_click_sending_one_form_twice_at_once_makes_one_submission(mariadb):
    student = person("clicker")
    problem = make_problem(languages=("python",))
    clients = [Client() for _ in range(4)]
    for client in clients:
        client.force_login(student)
    form = _rendered_form(clients[0], f"/problems/{problem.pk}")
    responses = run_concurrently([lambda c=c: c.post(f"/problems/{problem.pk}", form) for c in clients])
    raise_first_error(responses)
    submission = Submission.objects.get()
    assert {(r.status_code, r["Location"]) for r in responses} == {(302, f"/submissions/ALGO/{submission.pk}")}
    assert JudgeJob.objects.count() == 1 and IdempotencyKey.objects.count() == 1
