"""Exams: submitting into one, objective answers, the hand-in, scores and deletion.

A participant's submits, answers and hand-in are serialised on the participant's row lock
(rank EXAM_PARTICIPANT in `judging.locking`, before any submission), and each re-checks the
participant's state under it: a hand-in happens once, and every later or concurrent one
reads back the confirmation that transaction committed.
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q
from django.utils.translation import gettext, gettext_lazy

from judging.clock import require_agreeing_clock
from judging.locking import lock_exam_participant, lock_exam_participants, lock_submission, save_locked
from judging.models import (
    SUBMISSION_MODELS, Exam, ExamAnswer, ExamParticipant, ExamProblem, ExamQuestion, PriorityClass, ProblemKind,
    QuestionKind,
)
from judging.services.rejudge import queue_generation, submission_delete
from kece.errors import ExamClosed, Invalid, NotFound, RevisionConflict

logger = logging.getLogger("kece.exams")

NOT_STARTED, OPEN, HANDED_IN, CLOSED = "NOT_STARTED", "OPEN", "HANDED_IN", "CLOSED"
# How `exam_update` names a field it refuses to change once the exam has started.
FIXED_ONCE_STARTED = "fixed once the exam has started"


def participant_state(exam, participant, *, now) -> str:
    if participant.handed_in_at is not None:
        return HANDED_IN
    if now < exam.starts_at:
        return NOT_STARTED
    return OPEN if now < exam.ends_at else CLOSED


def exam_for_submit(exam_id, *, problem, practice):
    """The exam a submission names, if it holds the problem (checked again under the lock)."""
    if exam_id is None:
        return None
    if practice is not None:
        raise Invalid(gettext("A submission belongs to a lesson practice or to an exam, not both."),
                      fields={"examId": ["not with lessonPracticeId"]})
    exam = Exam.objects.filter(pk=exam_id, deleted_at__isnull=True).first()
    if exam is None or problem is None or not ExamProblem.objects.filter(exam=exam, problem=problem).exists():
        raise Invalid(gettext("This exam does not exist or does not contain the problem."),
                      fields={"examId": ["unknown for this problem"]})
    return exam


def _locked_participant(exam_id: int, user):
    """Lock the user's participant row; an exam that is deleted or not theirs is not found.

    The exam is read after the lock: deleting an exam locks all its participants first, so
    a deletion either committed before this read or waits for this transaction."""
    pk = ExamParticipant.objects.filter(exam_id=exam_id, user=user).values_list("pk", flat=True).first()
    participant = lock_exam_participant(pk) if pk is not None else None
    exam = Exam.objects.filter(pk=exam_id, deleted_at__isnull=True).first() if participant else None
    if exam is None:
        raise NotFound()
    return exam, participant


def handed_in_at_the_end(exam, participant) -> bool:
    """Handed in by the end-of-exam step, for a participant who had not: not their doing."""
    return participant.handed_in_at is not None and participant.handed_in_at >= exam.ends_at


# In the reader's language, as every refusal a participant reads (the API's `detail` too).
_REFUSALS = {
    NOT_STARTED: gettext_lazy("The exam has not started yet."),
    HANDED_IN: gettext_lazy("You have handed in this exam; it takes no more answers or submissions."),
    CLOSED: gettext_lazy("The exam has ended; it takes no more answers or submissions."),
}


def _refusal(exam, participant, state: str) -> str:
    # Handed in at the end: the exam ended (what was saved was handed in); not "you have
    # handed in", which a student who did nothing would read as someone else's doing.
    return str(_REFUSALS[CLOSED if state == HANDED_IN and handed_in_at_the_end(exam, participant) else state])


def submit_window(exam_id: int, user, *, now) -> tuple[str | None, datetime | None]:
    """(why the exam takes no submission from `user` now — not started, handed in, ended — in
    their language, or None; the exam's end while it takes theirs). (None, None) when it is
    not theirs (the submit says so). One read."""
    participant = ExamParticipant.objects.filter(exam_id=exam_id, user=user, exam__deleted_at__isnull=True) \
        .select_related("exam").first() if getattr(user, "is_authenticated", False) else None
    if participant is None:
        return None, None
    state = participant_state(participant.exam, participant, now=now)
    return (None, participant.exam.ends_at) if state == OPEN else (_refusal(participant.exam, participant, state), None)


def closed_to(exam_id: int, user, *, now) -> str | None:
    """Why the exam takes no submission from `user` now (`submit_window`), or None."""
    return submit_window(exam_id, user, now=now)[0]


def _require_open(exam, participant, *, now) -> None:
    require_agreeing_clock()  # an exam's window is a deadline too
    state = participant_state(exam, participant, now=now)
    if state != OPEN:
        raise ExamClosed(_refusal(exam, participant, state))


def not_a_participant() -> Invalid:
    return Invalid(gettext("You are not a participant of this exam."), fields={"examId": ["not a participant"]})


def exam_open_to(exam_id: int, *, user, now) -> None:
    """Before anything of an exam's problems or questions is read for `user`: they take the
    exam and it is open to them. The same refusals whatever problem or question the request
    names, so an outsider, or a participant before the start, learns nothing of what the
    exam holds. A plain read: the caller's locked check decides."""
    participant = (ExamParticipant.objects.filter(exam_id=exam_id, user=user, exam__deleted_at__isnull=True)
                   .select_related("exam").first())
    if participant is None:
        raise NotFound()
    _require_open(participant.exam, participant, now=now)


def exam_entry(exam, *, user, now):
    """Inside a submit's transaction: lock the participant and check the exam is open to
    them (not handed in, between start and end)."""
    try:
        exam, participant = _locked_participant(exam.pk, user)
    except NotFound:
        raise not_a_participant() from None
    _require_open(exam, participant, now=now)
    return participant


def exam_answer_save(*, exam_id: int, question_id: int, user, choices: list, now) -> ExamAnswer:
    exam_open_to(exam_id, user=user, now=now)
    question = ExamQuestion.objects.filter(pk=question_id, exam_id=exam_id).first()
    if question is None:
        raise NotFound()
    if any(not isinstance(c, int) or not 0 <= c < len(question.options) for c in choices) \
            or len(set(choices)) != len(choices):
        raise Invalid(gettext("Each choice must be the index of a distinct option."),
                      fields={"choices": ["unknown option"]})
    if question.kind == QuestionKind.SINGLE and len(choices) > 1:
        raise Invalid(gettext("This question takes one choice."), fields={"choices": ["one choice only"]})
    with transaction.atomic(durable=True):
        exam, participant = _locked_participant(exam_id, user)
        _require_open(exam, participant, now=now)
        # The participant's lock serialises its answers: a plain read and write, no row lock
        # of its own (update_or_create would take one outside the lock helper).
        answer = ExamAnswer.objects.filter(participant=participant, question=question).first() \
            or ExamAnswer(participant=participant, question=question)
        answer.choices = sorted(choices)
        answer.save()
    return answer


@dataclass(frozen=True)
class HandIn:
    handed_in_at: object
    jobs: int
    # Whether this call handed in (not part of the confirmation every caller gets).
    fresh: bool = field(default=False, compare=False)


def _last_submissions(exam, user_id: int) -> list:
    """(type, id) of the last live submission of each exam problem, in lock order."""
    kinds = dict(ExamProblem.objects.filter(exam=exam).values_list("problem_id", "problem__kind"))
    found = []
    for problem_id, kind in kinds.items():
        submission_type = ProblemKind(kind).value
        last = (SUBMISSION_MODELS[submission_type].objects
                .filter(exam=exam, user_id=user_id, problem_id=problem_id, deleted_at__isnull=True)
                .order_by("-id").values_list("id", flat=True).first())
        if last is not None:
            found.append((submission_type, last))
    return sorted(found, key=lambda ref: (ref[0] != "ALGO", ref[1]))


def _score_objective(exam, participant) -> int:
    answers = {a.question_id: a for a in ExamAnswer.objects.filter(participant=participant)}
    total = 0
    for question in ExamQuestion.objects.filter(exam=exam):
        answer = answers.get(question.pk)
        if answer is not None:
            answer.score = question.score_for(answer.choices)
            answer.save(update_fields=["score", "updated_at"])
            total += answer.score
    return total


def _hand_in_locked(exam, participant, *, now) -> HandIn:
    if participant.handed_in_at is not None:
        return HandIn(participant.handed_in_at, participant.hand_in_jobs or 0)
    if now < exam.starts_at:
        raise ExamClosed(str(_REFUSALS[NOT_STARTED]))
    # The last submission of each problem is judged unless it already has a job: in OI none
    # has one yet; in ACM every one was judged when submitted, so none is judged twice.
    jobs = 0
    for submission_type, submission_id in _last_submissions(exam, participant.user_id):
        submission = lock_submission(submission_type, submission_id)
        if submission.current_judge_job_id is None:
            queue_generation(submission, generation=1, now=now, priority_class=PriorityClass.EXAM)
            jobs += 1
    participant.objective_score = _score_objective(exam, participant)
    participant.handed_in_at = min(now, exam.ends_at)
    participant.hand_in_jobs = jobs
    save_locked(participant, ["objective_score", "handed_in_at", "hand_in_jobs"])
    logger.info("exam handed in", extra={"exam": exam.pk, "participant": participant.pk, "jobs": jobs,
                                         "objective": participant.objective_score})
    return HandIn(participant.handed_in_at, jobs, fresh=True)


def exam_hand_in(*, exam_id: int, user, now) -> HandIn:
    """Hand in the user's exam; a repeat (or a concurrent twin) gets the same confirmation."""
    require_agreeing_clock()
    with transaction.atomic(durable=True):
        exam, participant = _locked_participant(exam_id, user)
        return _hand_in_locked(exam, participant, now=now)


def exams_hand_in_overdue(*, now, batch: int = 200, until: float | None = None) -> int:
    """Hand in for every participant of an ended exam who did not, `batch` at a time, until
    none is left or the monotonic time `until` (one batch without it): a large exam's
    thousands are handed in within a pass or two, not a batch a tick. Several workers may run
    this at once: each hand-in re-checks under the participant's lock, so each participant
    is handed in once. Returns how many this call handed in."""
    handed = 0
    while True:
        overdue = list(ExamParticipant.objects.filter(
            handed_in_at__isnull=True, exam__ends_at__lte=now, exam__deleted_at__isnull=True,
        ).order_by("id").values_list("exam_id", "user_id")[:batch])
        for exam_id, user_id in overdue:
            try:
                handed += exam_hand_in(exam_id=exam_id, user=user_id, now=now).fresh
            except NotFound:
                continue  # deleted meanwhile
        if len(overdue) < batch or until is None or time.monotonic() >= until:
            return handed


def exam_delete(*, exam_id: int, now) -> None:
    """Delete an exam: no participant may submit or hand in once it commits (it locks them
    all, and they re-read the exam under their lock), then its submissions are deleted."""
    def lock_participants(exam):
        lock_exam_participants(ExamParticipant.objects.filter(exam=exam).values_list("pk", flat=True))

    delete_with_submissions(Exam, exam_id, now=now, link="exam", lock=lock_participants)


# --- administration ------------------------------------------------------------------------------

def _checked_window(starts_at, ends_at) -> None:
    if ends_at <= starts_at:
        raise Invalid(gettext("An exam must end after it starts."), fields={"endsAt": ["not after startsAt"]})


def question_checked(question: dict) -> dict:
    """A question's correct set must name distinct options, exactly one for SINGLE (the pages
    check each row with this before saving, to show the refusal next to it)."""
    options, correct = question["options"], question["correct"]
    if not options or len(set(correct)) != len(correct) or any(not 0 <= c < len(options) for c in correct) \
            or not correct or (question["kind"] == QuestionKind.SINGLE and len(correct) != 1):
        raise Invalid(gettext("A question's correct answer must be distinct option indexes (exactly one for SINGLE)."),
                      fields={"questions": ["invalid correct set"]})
    return question


def checked_problem_ids(problem_ids: list, *, field: str) -> list:
    """Each problem exists (not a canary, not deleted) and appears once."""
    from judging.models import Problem

    known = Problem.objects.filter(pk__in=problem_ids, is_canary=False, deleted_at__isnull=True).count()
    if len(set(problem_ids)) != len(problem_ids) or known != len(problem_ids):
        raise Invalid(gettext("Each problem must exist and appear once."), fields={field: ["unknown or repeated"]})
    return problem_ids


def _problem_rows(exam, problems: list) -> list:
    return [ExamProblem(exam=exam, problem_id=p["problem_id"], points=p["points"], ordinal=i)
            for i, p in enumerate(problems)]


def _question_rows(exam, questions: list) -> list:
    return [ExamQuestion(exam=exam, ordinal=i, **q) for i, q in enumerate(questions)]


def exam_create(*, title: str, mode: str, starts_at, ends_at, problems: list, questions: list) -> Exam:
    """problems: [{problem_id, points}]; questions: [{kind, prompt, options, correct, points}]."""
    _checked_window(starts_at, ends_at)
    checked_problem_ids([p["problem_id"] for p in problems], field="problems")
    checked = [question_checked(q) for q in questions]
    with transaction.atomic(durable=True):
        exam = Exam.objects.create(title=title, mode=mode, starts_at=starts_at, ends_at=ends_at)
        ExamProblem.objects.bulk_create(_problem_rows(exam, problems))
        ExamQuestion.objects.bulk_create(_question_rows(exam, checked))
    logger.info("exam created", extra={"exam": exam.pk, "mode": mode})
    return exam


def update_at_revision(model, pk: int, revision: int, values: dict):
    """One conditional UPDATE on the row's revision: a stale revision changes nothing."""
    changed = model.objects.filter(pk=pk, revision=revision, deleted_at__isnull=True).update(
        revision=F("revision") + 1, **values)
    current = model.objects.filter(pk=pk, deleted_at__isnull=True).first()
    if current is None:
        raise NotFound()
    if not changed:
        raise RevisionConflict(gettext("It is at revision %(current)d, not %(given)d.")
                               % {"current": current.revision, "given": revision})
    return current


def _content_changes(exam, *, mode, problems, questions) -> list[str]:
    """Which of mode, problems and questions differ from what the exam holds (in order)."""
    changed = []
    if mode is not None and mode != exam.mode:
        changed.append("mode")
    if problems is not None and [(p["problem_id"], p["points"]) for p in problems] != list(
            ExamProblem.objects.filter(exam=exam).values_list("problem_id", "points")):
        changed.append("problems")
    if questions is not None and [(q["kind"], q["prompt"], list(q["options"]), sorted(q["correct"]), q["points"])
                                  for q in questions] != [
            (q.kind, q.prompt, q.options, sorted(q.correct), q.points) for q in ExamQuestion.objects.filter(exam=exam)]:
        changed.append("questions")
    return changed


def _taken(exam) -> bool:
    """Whether anyone has answered or submitted in the exam (possible only once it opened)."""
    return ExamAnswer.objects.filter(participant__exam=exam).exists() or any(
        model.objects.filter(exam=exam).exists() for model in SUBMISSION_MODELS.values())


def exam_update(*, exam_id: int, revision: int, changes: dict, now) -> Exam:
    """Change title, mode, start, end, problems ([{problem_id, points}], in order) or questions
    ([{kind, prompt, options, correct, points}], in order), based on the revision read.

    1. The mode, problems and questions are fixed once the exam has started (by its saved or
       its new start) or anyone has answered or submitted: a hand-in's batch and objective
       score, and the scores derived since, are computed from them. Sending them unchanged
       is not a change.
    2. One conditional UPDATE on the revision; under it (the row is now locked by that
       UPDATE) the problems and questions are replaced, in the same transaction.
    """
    exam = Exam.objects.filter(pk=exam_id, deleted_at__isnull=True).first()
    if exam is None:
        raise NotFound()
    changes = dict(changes)
    problems, questions = changes.pop("problems", None), changes.pop("questions", None)
    _checked_window(changes.get("starts_at", exam.starts_at), changes.get("ends_at", exam.ends_at))
    if problems is not None:
        checked_problem_ids([p["problem_id"] for p in problems], field="problems")
    if questions is not None:
        questions = [question_checked(q) for q in questions]
    content = _content_changes(exam, mode=changes.get("mode"), problems=problems, questions=questions)
    if content and (min(exam.starts_at, changes.get("starts_at", exam.starts_at)) <= now or _taken(exam)):
        raise Invalid(gettext("An exam's mode, problems and questions are fixed once it has started."),
                      fields={name: [FIXED_ONCE_STARTED] for name in content})
    with transaction.atomic(durable=True):
        # The revision read is the one the checks above saw: a change in between is a conflict.
        exam = update_at_revision(Exam, exam_id, revision, changes)
        if "problems" in content:
            ExamProblem.objects.filter(exam=exam).delete()
            ExamProblem.objects.bulk_create(_problem_rows(exam, problems))
        if "questions" in content:
            ExamQuestion.objects.filter(exam=exam).delete()
            ExamQuestion.objects.bulk_create(_question_rows(exam, questions))
    logger.info("exam updated", extra={"exam": exam.pk, "revision": exam.revision, "content": content})
    return exam


def exam_publish(*, exam_id: int, now) -> Exam:
    exam = Exam.objects.filter(pk=exam_id, deleted_at__isnull=True).first()
    if exam is None:
        raise NotFound()
    if exam.published_at is None:
        Exam.objects.filter(pk=exam_id, published_at__isnull=True).update(published_at=now,
                                                                          revision=F("revision") + 1)
        exam.refresh_from_db()
    return exam


def participants_add(*, exam_id: int, user_ids: list = (), usernames: list = ()) -> int:
    """Add users, by id or by username, to an exam; all of them or, if any is unknown, none
    (the refusal names the unknown ones). Returns how many were not participants yet."""
    from django.contrib.auth import get_user_model

    if not Exam.objects.filter(pk=exam_id, deleted_at__isnull=True).exists():
        raise NotFound()
    users = get_user_model().objects
    found = set(users.filter(pk__in=user_ids).values_list("pk", flat=True))
    if found != set(user_ids):
        raise Invalid(gettext("Some users do not exist."), fields={"userIds": sorted(set(user_ids) - found)})
    if usernames:
        named = dict(users.filter(username__in=usernames).values_list("username", "pk"))
        # The database may compare names without regard to case; only exact names count.
        unknown = sorted(set(usernames) - set(named))
        if unknown:
            raise Invalid(gettext("Some users do not exist."), fields={"usernames": unknown})
        found |= set(named.values())
    before = ExamParticipant.objects.filter(exam_id=exam_id).count()
    ExamParticipant.objects.bulk_create([ExamParticipant(exam_id=exam_id, user_id=pk) for pk in sorted(found)],
                                        ignore_conflicts=True)
    return ExamParticipant.objects.filter(exam_id=exam_id).count() - before


def results_visible(exam) -> bool:
    """ACM scores are live; OI ones are shown once an admin publishes them."""
    return exam.judges_at_once or exam.published_at is not None


def objective_shown(exam, viewer, *, now) -> bool:
    """Whether `viewer` may see how the objective answers were scored (each question's points,
    and the total that includes them). Until the exam ends, anyone who handed in early would
    otherwise read the answer key while the others still answer: only those who manage exams
    see it; from the end, as the mode says (ACM at once, OI once published)."""
    from kece.permissions import can_manage_exams

    return can_manage_exams(viewer) or (now >= exam.ends_at and results_visible(exam))


NOT_JUDGED = "not_judged"


def hidden_wait(submission, viewer, *, handed_in=None) -> str | None:
    """Why an exam submission's result is not shown to `viewer` yet (its `waitReason`), or
    None: an OI submission waits for the hand-in, then (except for admins) for publishing.
    `NOT_JUDGED`: the hand-in came and did not judge it (a later submission of its problem
    was the last), nor will anything (`held_status`). `handed_in`: the (exam, user) pairs
    handed in, when the caller read them for a list (`handed_in_pairs`); else read here."""
    from kece.permissions import can_manage_judgers

    if not submission.exam_id or submission.deleted_at is not None:
        return None  # a deleted one is CANCELLED, whatever its exam
    if submission.current_judge_job_id is None:
        # The hand-in queues every last submission in its transaction: after it, one without
        # a job is one it passed over.
        if handed_in is None:
            handed_in = handed_in_pairs([submission])
        return NOT_JUDGED if (submission.exam_id, submission.user_id) in handed_in else "hand_in"
    if can_manage_judgers(viewer) or results_visible(submission.exam):
        return None
    return "unpublished"


def handed_in_pairs(submissions) -> set:
    """The (exam, user) pairs of `submissions` whose participant has handed in: one
    statement for a list, read only for exam submissions still without a job."""
    pairs = {(s.exam_id, s.user_id) for s in submissions if s.exam_id and s.current_judge_job_id is None}
    if not pairs:
        return set()
    condition = Q()
    for exam_id, user_id in pairs:
        condition |= Q(exam_id=exam_id, user_id=user_id)
    return set(ExamParticipant.objects.filter(condition, handed_in_at__isnull=False)
               .values_list("exam_id", "user_id"))


def held_status(hidden: str) -> str:
    """The status a submission held by its exam (`hidden_wait`) shows: PENDING while it
    waits, CANCELLED once it will never be judged."""
    return "CANCELLED" if hidden == NOT_JUDGED else "PENDING"


def delete_submissions(*, now, **link) -> None:
    """Delete every live submission linked as `link` says (an exam, a practice, a problem),
    one at a time as an admin would: open jobs CANCELLED, late results `superseded`."""
    for submission_type, model in SUBMISSION_MODELS.items():
        for submission_id in model.objects.filter(deleted_at__isnull=True, **link).values_list("id", flat=True):
            try:
                submission_delete(submission_type=submission_type, submission_id=submission_id, now=now)
            except NotFound:
                continue  # deleted meanwhile


def delete_with_submissions(model, pk: int, *, now, link: str, lock=None, **lookup) -> None:
    """Mark an exam, practice or problem deleted, then delete each submission that names it
    (`link`) as one is deleted today: open jobs CANCELLED, late results `superseded`,
    statistics recomputed without them. Repeating it finishes an interrupted sweep."""
    row = model.objects.filter(pk=pk, **lookup).first()
    if row is None:
        raise NotFound()
    if row.deleted_at is None:
        with transaction.atomic(durable=True):
            if lock is not None:
                lock(row)
            model.objects.filter(pk=pk).update(deleted_at=now)
        logger.info("deleted with its submissions", extra={"model": model._meta.model_name, "id": pk})
    delete_submissions(now=now, **{link: row})
