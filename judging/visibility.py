"""Who may see a problem, and practise it outside an exam.

An exam's problems are its secret until it ends: while an exam that holds a problem has not
ended (and is not deleted), the problem is seen only by admins and teachers and, from the
exam's start, by that exam's participants, whatever the problem's own visibility says. Once
no such exam is left, the problem's visibility decides (`ProblemVisibility`): PUBLIC for
everyone, EXAM_ONLY for the participants of the started exams that hold it, HIDDEN for admins
and teachers. A teacher who wants an exam's problem public afterwards sets it PUBLIC, before
or after the exam: it opens to everyone the moment the exam ends, not before.

A participant may not practise a problem of their exam outside it until the exam ends, even
after handing in: the practice verdict would show what the exam hides (OI) or give feedback
that is not counted as an attempt (ACM), and a handed-in participant could pass it on.
"""

from django.db.models import Exists, OuterRef, Q

from judging.models import ExamParticipant, ExamProblem, Problem, ProblemVisibility
from kece.permissions import can_manage_exams


def _exams_not_ended(now):
    return Q(exam__deleted_at__isnull=True, exam__ends_at__gt=now)


def in_exam_not_ended(now):
    """A filter for problems held by an exam that has not ended: `Problem.objects.filter(~…)`
    leaves the ones no exam keeps secret now."""
    return Exists(ExamProblem.objects.filter(_exams_not_ended(now), problem=OuterRef("pk")))


def listed_problems(user, *, now):
    """The live problems `user` finds in the problem list (admins and teachers: all of them;
    everyone else: the public ones no exam keeps secret now)."""
    problems = Problem.objects.filter(current_manifest__isnull=False, is_canary=False, deleted_at__isnull=True)
    if can_manage_exams(user):
        return problems
    return problems.filter(~in_exam_not_ended(now), visibility=ProblemVisibility.PUBLIC)


def kept_by_my_exams(problems, user, *, now) -> int:
    """How many of `problems` (public, live) leave `user`'s lists now because an exam they
    are taking keeps them: they know the exam holds them; no one else is told."""
    kept = problems.filter(in_exam_not_ended(now), current_manifest__isnull=False, is_canary=False,
                           deleted_at__isnull=True, visibility=ProblemVisibility.PUBLIC)
    return sum(1 for problem in kept if exam_keeping(problem, user, now=now))


def _participations(problem, user, *, now):
    """The user's participations in the started, live exams that hold `problem`."""
    return ExamParticipant.objects.filter(
        user=user, exam__deleted_at__isnull=True, exam__starts_at__lte=now,
        exam__problems__problem=problem)


def may_view(problem, user, *, now) -> bool:
    if can_manage_exams(user):
        return True
    signed_in = bool(user and user.is_authenticated)
    if ExamProblem.objects.filter(_exams_not_ended(now), problem=problem).exists():
        return signed_in and _participations(problem, user, now=now).filter(exam__ends_at__gt=now).exists()
    if problem.visibility == ProblemVisibility.PUBLIC:
        return True
    return (problem.visibility == ProblemVisibility.EXAM_ONLY and signed_in
            and _participations(problem, user, now=now).exists())


def exam_keeping(problem, user, *, now):
    """The exam, started and not ended, in which `user` takes `problem`, or None: while there
    is one, the user practises the problem only inside it. An exam of theirs that has not
    started is never named: what it holds is its secret until then (and while it keeps the
    problem, no one but admins and teachers sees it, `may_view`)."""
    if not (user and user.is_authenticated):
        return None
    participant = (_participations(problem, user, now=now).filter(exam__ends_at__gt=now)
                   .select_related("exam").order_by("exam__ends_at").first())
    return participant.exam if participant else None
