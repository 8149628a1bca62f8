"""The system account (`judging.system`) is created the first time a periodic pass needs it;
passes that need it at once, each then queueing a job it owns, end with one account and no
error."""

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from judging.models import Submission
from judging.system import USERNAME, system_user
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import make_problem

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

ROUNDS = 100


def test_passes_that_need_the_system_account_at_once_create_one_and_each_use_it():
    problem = make_problem(languages=("python",))

    def a_pass():
        owner = system_user()
        with transaction.atomic(durable=True):  # as a pass queues its hidden job
            Submission.objects.create(user_id=owner.pk, problem=problem, language="python", code="print(1)", source_bytes=8)
        return owner.pk

    for _ in range(ROUNDS):
        Submission.objects.filter(user__username=USERNAME).delete()
        get_user_model().objects.filter(username=USERNAME).delete()
        owners = run_concurrently([a_pass] * 8)
        raise_first_error(owners)
        account = get_user_model().objects.get(username=USERNAME)
        assert set(owners) == {account.pk}
        assert not account.is_active and not account.has_usable_password()
