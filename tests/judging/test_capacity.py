"""Capacity advice: a pool's arrival rate and mean judge time over a recent window, measured
from the job table (and cached), say by Little's law whether its ready slots carry the load
with headroom — on the console's pool strip, in English and Chinese — and an exam's page sizes
its expected burst against the ready slots now."""

from datetime import timedelta
from itertools import count

import pytest
from django.core.cache import cache
from django.utils import timezone

from judging.capacity import (
    ENOUGH, QUIET, SHORT, UNMEASURED, PoolLoad, ProblemDemand, burst_slots, exam_burst, measure_loads, pool_advice,
    pool_loads,
)
from judging.models import JobKind, JobState, JudgeJob
from tests.api.helpers import make_admin, session_client
from tests.factories import HostGroupFactory, UserFactory, make_exam, make_node, make_problem

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]

_ids = count(1)
ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}


def _history(pool, *, now, jobs, every_s, judge_s, kind=JobKind.JUDGE, state=JobState.COMPLETED, ago_s=0):
    """`jobs` judge jobs of `pool`, one created every `every_s` seconds back from `ago_s`
    seconds before `now`, each holding its slot `judge_s` seconds."""
    rows = []
    for i in range(jobs):
        created = now - timedelta(seconds=ago_s + i * every_s)
        done = state == JobState.COMPLETED
        rows.append(JudgeJob(kind=kind, submission_type="ALGO", submission_id=next(_ids), pool=pool,
                             runtime_spec=f"{pool}-r1", state=state, available_at=created, claim_key=created,
                             created_at=created, started_at=created if done else None,
                             finished_at=created + timedelta(seconds=judge_s) if done else None))
    JudgeJob.objects.bulk_create(rows)


def _ready(pool, *slots):
    group = HostGroupFactory(total_slots=64)
    for n in slots:
        make_node(pool=pool, max_slots=n, host_group=group)


def test_the_load_is_the_windows_arrivals_and_their_mean_judge_time():
    now = timezone.now()
    # 0.8 jobs/s for the last minute, 4 s each; older work, self-checks and another pool aside.
    _history("python", now=now, jobs=48, every_s=1.25, judge_s=4)
    _history("python", now=now, jobs=30, every_s=1, judge_s=40, ago_s=61)
    _history("python", now=now, jobs=5, every_s=1, judge_s=40, kind=JobKind.DIAGNOSTIC)
    _history("java", now=now, jobs=6, every_s=10, judge_s=2)
    _history("java", now=now, jobs=6, every_s=10, judge_s=0, state=JobState.QUEUED, ago_s=1)
    loads = measure_loads(now=now, window_s=60)
    python, java = loads["python"], loads["java"]
    assert (python.arrivals, python.judged, python.arrival_rate, python.judge_seconds) == (48, 48, 0.8, 4.0)
    assert (java.arrivals, java.judged, java.judge_seconds) == (12, 6, 2.0)
    assert (loads["cpp"].arrivals, loads["cpp"].judge_seconds) == (0, None)


def test_the_measure_is_served_from_the_cache_until_it_expires():
    now = timezone.now()
    _history("python", now=now, jobs=6, every_s=1, judge_s=1)
    assert pool_loads(now=now, window_s=60)["python"].arrivals == 6
    _history("python", now=now, jobs=6, every_s=1, judge_s=1, ago_s=0.5)
    assert pool_loads(now=now, window_s=60)["python"].arrivals == 6
    cache.clear()
    assert pool_loads(now=now, window_s=60)["python"].arrivals == 12


def test_littles_law_with_headroom_says_enough_or_how_many_slots_to_add():
    enough = pool_advice(pool="python", arrival_rate=0.8, judge_seconds=4.0, ready_slots=8, max_utilisation=0.8)
    assert (enough.verdict, round(enough.busy_slots, 6), enough.add_slots) == (ENOUGH, 3.2, 0)
    # 3.2 busy of 4 is exactly 80 %: still enough; of 3 it is not, and 4 keep it at 80 %.
    assert pool_advice(pool="python", arrival_rate=0.8, judge_seconds=4.0, ready_slots=4,
                       max_utilisation=0.8).verdict == ENOUGH
    short = pool_advice(pool="python", arrival_rate=0.8, judge_seconds=4.0, ready_slots=3, max_utilisation=0.8)
    assert (short.verdict, short.add_slots) == (SHORT, 1)
    assert pool_advice(pool="python", arrival_rate=0, judge_seconds=None, ready_slots=0,
                       max_utilisation=0.8).verdict == QUIET
    assert pool_advice(pool="python", arrival_rate=0.1, judge_seconds=None, ready_slots=2,
                       max_utilisation=0.8).verdict == UNMEASURED


def test_a_burst_needs_its_work_over_the_target_in_slots():
    assert burst_slots(submissions=120, judge_seconds=2.0, target_s=60) == 4
    assert burst_slots(submissions=1, judge_seconds=0.1, target_s=60) == 1
    assert burst_slots(submissions=0, judge_seconds=2.0, target_s=60) == 0
    loads = {p: PoolLoad(p, 3600, 0, 0, None) for p in ("python", "cpp")}
    loads["python"] = PoolLoad("python", 3600, 30, 30, 0.5)
    # Both of the problem's languages: the measured arrivals send it all to python, at python's
    # measured time; a problem only in cpp is estimated from its declared limits.
    needs = exam_burst(problems=[ProblemDemand(("python", "cpp"), 2.0), ProblemDemand(("cpp",), 90.0)],
                       submissions=240, target_s=60, loads=loads, ready_slots={"python": 8})
    assert [(n.pool, n.submissions, n.judge_seconds, n.measured, n.slots_needed, n.enough, n.in_time)
            for n in needs] == [("cpp", 120, 90.0, False, 180, False, False),
                                ("python", 120, 0.5, True, 1, True, True)]


def test_the_pool_strip_says_whether_the_ready_slots_suffice_in_english_and_chinese(settings):
    settings.KECE_CAPACITY_WINDOW_S = 60
    now = timezone.now()
    _history("python", now=now, jobs=48, every_s=1, judge_s=4, ago_s=1)
    _ready("python", 4, 4)
    _history("java", now=now, jobs=48, every_s=1, judge_s=4, ago_s=1)
    _ready("java", 3)
    admin = session_client(make_admin())
    page = admin.get("/admin/judgers").content.decode()
    assert ("Needs about 3.2 busy slots on average (0.80 jobs/s × 4.0 s, last 1 min). 8 ready slots: enough to "
            "keep at most 80% busy.") in page
    assert "3 ready slots: not enough to keep at most 80% busy. Add 1 slot." in page
    assert "Nothing arrived in the last 1 min: no load to size." in page
    chinese = admin.get("/admin/judgers", **ZH).content.decode()
    assert "平均约需 3.2 个忙碌槽位（0.80 个任务/秒 × 4.0 秒，最近 1 分钟）。就绪槽位 8 个：足够，繁忙度不超过 80%。" in chinese
    assert "就绪槽位 3 个：不足以使繁忙度不超过 80%。请增加 1 个槽位。" in chinese


def _exam_with(problems, *, mode, participants):
    users = [UserFactory() for _ in range(participants)]
    return make_exam(*problems, mode=mode, participants=users, now=timezone.now() + timedelta(days=1))


def test_the_exam_page_sizes_its_burst_against_the_ready_slots(settings):
    settings.KECE_EXAM_SUBMISSIONS_PER_PROBLEM = 3
    settings.KECE_EXAM_BURST_TARGET_S = 60
    one, two = (make_problem(languages=("python",), cases=2, time_limit_ms=1000) for _ in range(2))
    exam = _exam_with([one, two], mode="ACM", participants=20)
    _ready("python", 2)
    admin = session_client(make_admin())
    page = admin.get(f"/admin/exams/{exam.pk}").content.decode()
    # 20 × 2 × 3 = 120 submissions of 2 s each (2 cases at 1 s, nothing measured) in 60 s: 4 slots.
    assert "Expected burst: 120 submissions (20 participants × 2 problems × 3.0 per problem), to be judged " \
           "within 60 s." in page
    assert ("Python: 120 submissions × 2.0 s (estimated from the problems&#x27; declared limits: every case at its "
            "time limit). Needs 4 slots to finish within 60 s. 2 ready slots now: not enough. Add 2 slots.") in page
    # The admin's own figures: 300 submissions within 5 minutes, with 0.5 s measured per judgement.
    _history("python", now=timezone.now(), jobs=10, every_s=1, judge_s=0.5, ago_s=1)
    cache.clear()
    page = admin.get(f"/admin/exams/{exam.pk}?submissions=300&within=300").content.decode()
    assert "Expected burst: 300 submissions (your figure), to be judged within 300 s." in page
    assert "Python: 300 submissions × 0.50 s (measured over the last 60 min). Needs 1 slot to finish within 300 s. " \
           "2 ready slots now: enough." in page
    chinese = admin.get(f"/admin/exams/{exam.pk}?submissions=300&within=300", **ZH).content.decode()
    assert "预计集中提交：300 份（你给出的数字），需在 300 秒内评测完。" in chinese
    assert "Python：300 份提交 × 0.50 秒（按最近 60 分钟实测）。需 1 个槽位才能在 300 秒内评完。现有就绪槽位 2 个：足够。" in chinese


def test_an_oi_exam_judges_one_per_problem_at_the_hand_in_and_a_bad_figure_falls_back():
    problem = make_problem(languages=("cpp",), cases=4, time_limit_ms=500)
    exam = _exam_with([problem], mode="OI", participants=30)
    admin = session_client(make_admin())
    response = admin.get(f"/admin/exams/{exam.pk}?within=-5")
    page = response.content.decode()
    assert response.status_code == 200
    assert "Expected burst: 30 submissions (30 participants × 1 problem × 1 — in OI the last submission of each " \
           "problem, judged at the hand-in), to be judged within 60 s." in page
    # 30 × 2 s = 60 s of judging in 60 s: one slot, and no ready C++ node.
    assert "Needs 1 slot to finish within 60 s. 0 ready slots now: not enough. Add 1 slot." in page
    assert "Ensure this value is greater than or equal to 1." in page


def test_an_exam_without_participants_says_so_rather_than_sizing_nothing():
    exam = _exam_with([make_problem(languages=("python",))], mode="ACM", participants=0)
    admin = session_client(make_admin())
    page = admin.get(f"/admin/exams/{exam.pk}").content.decode()
    assert "No participant yet: add them above, or give the submissions you expect below, to size the burst." in page
    assert "No problem to judge" not in page and "0 participants" not in page
    chinese = admin.get(f"/admin/exams/{exam.pk}", **ZH).content.decode()
    assert "还没有考生" in chinese
