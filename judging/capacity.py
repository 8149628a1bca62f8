"""Capacity advice: how many judge slots a pool's work needs, by Little's law.

A pool whose jobs arrive at λ jobs/s and hold a slot for s seconds each (the settling lease's
claim → its result) keeps λ × s slots busy on average. Its ready slots suffice when that stays
within a headroom (at most ρ of them busy, `KECE_CAPACITY_UTILISATION`): a queue of random
arrivals grows without bound as ρ nears 1. An exam's burst is sized apart: N submissions of s
seconds each, done within T seconds, need N × s / T slots working in parallel.

The measuring reads one index range per pool (`judge_job_arrivals`: pool, created_at) over a
recent window and is cached like the lesson statistics, so the console's strip, refreshed
every few seconds by every admin, costs the database one grouped read a minute. The advice
itself is plain arithmetic on explicit figures, for the console, the exam page or a bench.
"""

import math
from dataclasses import asdict, dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Q

from judging.models import JobKind, JobState, JudgeJob
from kece.caches import shared_or_computed
from pools.registry import POOLS

ENOUGH, SHORT, QUIET, UNMEASURED = "enough", "short", "quiet", "unmeasured"


@dataclass(frozen=True)
class PoolLoad:
    """A pool's judge jobs created in the window: how many, and of those judged, the mean
    time a slot was held (None when none was judged)."""
    pool: str
    window_s: int
    arrivals: int
    judged: int
    judge_seconds: float | None

    @property
    def arrival_rate(self) -> float:
        return self.arrivals / self.window_s


def measure_loads(*, now, window_s: int) -> dict[str, PoolLoad]:
    """Every pool's load over (now - window_s, now]: one grouped read on the arrivals index.
    Hidden checks count too (they take slots); diagnostic self-checks do not (a node runs
    its own, in its own slots, before it serves)."""
    held = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    judged = Q(state=JobState.COMPLETED, started_at__isnull=False, finished_at__isnull=False)
    rows = (JudgeJob.objects.filter(pool__in=list(POOLS), created_at__gt=now - timedelta(seconds=window_s),
                                    created_at__lte=now, kind=JobKind.JUDGE)
            .values("pool").annotate(arrivals=Count("id"), judged=Count("id", filter=judged),
                                     held=Avg(held, filter=judged)))
    found = {row["pool"]: row for row in rows}
    loads = {}
    for pool in POOLS:
        row = found.get(pool, {})
        mean = row.get("held")
        loads[pool] = PoolLoad(pool=pool, window_s=window_s, arrivals=row.get("arrivals", 0),
                               judged=row.get("judged", 0),
                               judge_seconds=mean.total_seconds() if mean is not None else None)
    return loads


def pool_loads(*, now, window_s: int | None = None) -> dict[str, PoolLoad]:
    """`measure_loads` over `KECE_CAPACITY_WINDOW_S`, from the cache while fresh
    (`KECE_CAPACITY_CACHE_S`)."""
    window_s = window_s or settings.KECE_CAPACITY_WINDOW_S
    found = shared_or_computed(
        f"kece:capacity-loads:{window_s}", timeout=settings.KECE_CAPACITY_CACHE_S,
        compute=lambda: {pool: asdict(load) for pool, load in measure_loads(now=now, window_s=window_s).items()})
    return {pool: PoolLoad(**load) for pool, load in found.items()}


@dataclass(frozen=True)
class PoolAdvice:
    pool: str
    verdict: str  # ENOUGH, SHORT, QUIET (nothing arrived), UNMEASURED (nothing judged yet)
    arrival_rate: float
    judge_seconds: float | None
    busy_slots: float | None  # λ × s
    ready_slots: int
    max_utilisation: float
    add_slots: int  # SHORT: ready slots to add so that at most max_utilisation are busy


def pool_advice(*, pool: str, arrival_rate: float, judge_seconds: float | None, ready_slots: int,
                max_utilisation: float) -> PoolAdvice:
    """Whether `ready_slots` carry `arrival_rate` jobs/s of `judge_seconds` each with at most
    `max_utilisation` of them busy on average, and if not, how many slots to add."""
    if arrival_rate <= 0:
        return PoolAdvice(pool, QUIET, 0.0, judge_seconds, 0.0, ready_slots, max_utilisation, 0)
    if judge_seconds is None:
        return PoolAdvice(pool, UNMEASURED, arrival_rate, None, None, ready_slots, max_utilisation, 0)
    busy = arrival_rate * judge_seconds
    needed = math.ceil(busy / max_utilisation - 1e-9)
    verdict = ENOUGH if needed <= ready_slots else SHORT
    return PoolAdvice(pool, verdict, arrival_rate, judge_seconds, busy, ready_slots, max_utilisation,
                      max(0, needed - ready_slots))


def burst_slots(*, submissions: float, judge_seconds: float, target_s: float) -> int:
    """Slots that judge `submissions` of `judge_seconds` each within `target_s` working in
    parallel (the work spread evenly; at least one slot for any work)."""
    if submissions <= 0:
        return 0
    return max(1, math.ceil(submissions * judge_seconds / target_s - 1e-9))


@dataclass(frozen=True)
class ProblemDemand:
    """One exam problem as the burst sees it: the pools it may be judged in and its own
    estimate of a judgement from its declared limits (every case running to the time limit)."""
    pools: tuple[str, ...]
    declared_seconds: float


@dataclass(frozen=True)
class BurstNeed:
    pool: str
    submissions: float
    judge_seconds: float  # the mean over this pool's share of the burst
    measured: bool  # from the pool's past jobs, else the problems' declared limits
    slots_needed: int
    ready_slots: int
    in_time: bool  # one judgement fits in the target at all

    @property
    def enough(self) -> bool:
        return self.in_time and self.slots_needed <= self.ready_slots

    @property
    def add_slots(self) -> int:
        return max(0, self.slots_needed - self.ready_slots)


def exam_burst(*, problems: list[ProblemDemand], submissions: float, target_s: float,
               loads: dict[str, PoolLoad], ready_slots: dict[str, int]) -> list[BurstNeed]:
    """Per pool, the slots an exam's `submissions` need to be judged within `target_s`.

    1. The submissions are spread evenly over the problems.
    2. A problem open to several languages splits its share by the pools' arrivals in the
       measured window (evenly when none of them had any).
    3. A pool's judgement takes its measured mean if it has one, else each problem's
       declared estimate.
    """
    per_problem = submissions / len(problems) if problems else 0
    work: dict[str, list[float]] = {}  # pool → [submissions, seconds of judging]
    for problem in problems:
        arrived = sum(loads[p].arrivals for p in problem.pools if p in loads)
        for pool in problem.pools:
            share = loads[pool].arrivals / arrived if arrived and pool in loads else 1 / len(problem.pools)
            load = loads.get(pool)
            seconds = load.judge_seconds if load and load.judge_seconds is not None else problem.declared_seconds
            figures = work.setdefault(pool, [0.0, 0.0, 0.0])
            figures[0] += per_problem * share
            figures[1] += per_problem * share * seconds
            if share:
                figures[2] = max(figures[2], seconds)
    needs = []
    for pool in POOLS:
        if pool not in work:
            continue
        count, seconds, longest = work[pool]
        if count <= 0:
            continue  # its problems' submissions all go to their other languages' pools
        load = loads.get(pool)
        needs.append(BurstNeed(
            pool=pool, submissions=count, judge_seconds=seconds / count,
            measured=bool(load and load.judge_seconds is not None),
            slots_needed=burst_slots(submissions=count, judge_seconds=seconds / count, target_s=target_s),
            ready_slots=ready_slots.get(pool, 0), in_time=longest <= target_s))
    return needs


def declared_seconds(manifest) -> float:
    """A judgement's estimate from the declared limits: every case at its time limit."""
    return manifest.time_limit_ms * max(1, len(manifest.cases or [])) / 1000


def problem_demand(problem) -> ProblemDemand | None:
    """`problem` as an exam's burst sees it (None without a manifest or a pool to judge it)."""
    manifest = problem.current_manifest
    if manifest is None:
        return None
    # The pools a submission to it may be routed to (`pools.registry.pool_for`).
    pools = tuple(p for p in manifest.languages if p in POOLS and POOLS[p].problem_kind == problem.kind)
    return ProblemDemand(pools=pools, declared_seconds=declared_seconds(manifest)) if pools else None


@dataclass(frozen=True)
class ExamAdvice:
    participants: int
    problems: int
    per_problem: float  # submissions per participant and problem the estimate assumed
    submissions: float  # expected, or the admin's own figure
    own_figure: bool
    at_hand_in: bool  # OI: the last submission of each problem, judged when the exam is handed in
    target_s: int
    window_s: int
    needs: list[BurstNeed]


def exam_advice(exam, *, now, target_s: int, per_problem: float, submissions: int | None = None) -> ExamAdvice:
    """An exam's burst against the ready slots now: its participants × problems × `per_problem`
    submissions (an OI exam judges one per problem, at hand-in), or the admin's `submissions`,
    judged within `target_s`."""
    from judging.exams import ExamParticipant
    from judging.selectors import ready_slots

    problems = list(exam.problems.select_related("problem__current_manifest"))
    participants = ExamParticipant.objects.filter(exam=exam).count()
    per_problem = per_problem if exam.judges_at_once else 1.0
    expected = submissions if submissions is not None else participants * len(problems) * per_problem
    demands = [demand for entry in problems if (demand := problem_demand(entry.problem)) is not None]
    window_s = settings.KECE_CAPACITY_WINDOW_S
    loads = pool_loads(now=now, window_s=window_s)
    return ExamAdvice(participants=participants, problems=len(problems), per_problem=per_problem,
                      submissions=expected, own_figure=submissions is not None,
                      at_hand_in=not exam.judges_at_once, target_s=target_s,
                      window_s=window_s, needs=exam_burst(problems=demands, submissions=expected, target_s=target_s,
                                                          loads=loads, ready_slots=ready_slots(now=now)))
