"""Periodic passes that run at once (two schedulers, a slow pass overtaken by the next)
plant one canary per node and queue one check per chosen verdict."""

import pytest
from django.utils import timezone

from judging.models import JudgeJob
from nodes.canaries_hidden import canaries_plant
from nodes.cross_checks import cross_checks_queue
from nodes.models import CrossCheck, HiddenCanary
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

ROUNDS = 5


def _one_judged_job(identity, student, problem, *, now):
    submit(student, problem, now=now)
    [job] = claim(identity, now=now)
    settle(identity, judged(job), now=now)
    return job


def test_two_planting_passes_at_once_plant_one_canary(settings):
    settings.KECE_CANARY_RATE = 1  # due after every judge job
    settings.KECE_CANARY_MIN_INTERVAL_S = 0
    student, problem = UserFactory(), make_problem(languages=("python",))
    for _ in range(ROUNDS):
        now = timezone.now()
        node, identity = make_node(pool="python")
        _one_judged_job(identity, student, problem, now=now)
        raise_first_error(run_concurrently([lambda: canaries_plant(now=now)] * 2))
        assert HiddenCanary.objects.filter(node_id=node.pk).count() == 1
        assert JudgeJob.objects.filter(bound_node_id=node.pk).count() == 1


def test_two_queueing_passes_at_once_queue_one_check_per_chosen_verdict(settings):
    settings.KECE_CROSS_CHECK_RATE = 1
    student, problem = UserFactory(), make_problem(languages=("python",))
    _, identity = make_node(pool="python")
    make_node(pool="python")
    for _ in range(ROUNDS):
        now = timezone.now()
        original = _one_judged_job(identity, student, problem, now=now)
        raise_first_error(run_concurrently([lambda: cross_checks_queue(now=now)] * 2))
        record = CrossCheck.objects.get(original_job_id=original.pk)
        assert JudgeJob.objects.filter(bound_node__isnull=False, created_at=now).values_list("id", flat=True) \
            .get() == record.check_job_id
