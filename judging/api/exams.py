"""The exam and lesson-practice APIs: the participant's calls and the admin's."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from judging.api.submissions import UserView, submission_json
from judging.models import ExamMode, ExamParticipant, ExamScore, QuestionKind
from judging.services import exams, lessons
from judging.selectors import shown_states, submission_keys, submissions_of
from kece.api import AdminView, ContractPagination, iso, validated
from kece.errors import NotFound, NotPublished
from kece.permissions import USER_AUTHENTICATION, ManagesExams
from kece.schema import errors

TAGS = ["exams"]
ADMIN_TAGS = ["admin"]


class ExamAdminView(AdminView):
    authentication_classes = USER_AUTHENTICATION
    permission_classes = [ManagesExams]


# --- serializers -----------------------------------------------------------------------------------

class ExamProblemOut(serializers.Serializer):
    problemId = serializers.IntegerField()
    title = serializers.CharField()
    kind = serializers.CharField()
    points = serializers.IntegerField()


class ExamQuestionOut(serializers.Serializer):
    questionId = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=QuestionKind.values)
    prompt = serializers.CharField()
    options = serializers.ListField(child=serializers.CharField())
    points = serializers.IntegerField()
    choices = serializers.ListField(child=serializers.IntegerField(), help_text="Your saved answer.")


class ExamSubmissionOut(serializers.Serializer):
    submissionType = serializers.CharField()
    submissionId = serializers.IntegerField()
    problemId = serializers.IntegerField()
    createdAt = serializers.DateTimeField()
    status = serializers.CharField(help_text="As in GET /api/v1/submissions/{type}/{id}.")
    waitReason = serializers.CharField(allow_null=True, help_text="hand_in, unpublished, or as for any submission.")
    score = serializers.IntegerField(allow_null=True)


class ListPageOut(serializers.Serializer):
    count = serializers.IntegerField(help_text="How many there are in all.")
    next = serializers.CharField(allow_null=True, help_text="The next page's URL (?page=, ?pageSize=).")
    previous = serializers.CharField(allow_null=True)


PAGE_PARAMETERS = [OpenApiParameter("page", int, description="Of the list, newest first; 1 by default."),
                   OpenApiParameter("pageSize", int, description="50 by default, at most 200.")]


class ExamOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    mode = serializers.ChoiceField(choices=ExamMode.values)
    startsAt = serializers.DateTimeField()
    endsAt = serializers.DateTimeField()
    state = serializers.ChoiceField(choices=[exams.NOT_STARTED, exams.OPEN, exams.HANDED_IN, exams.CLOSED])
    handedInAt = serializers.DateTimeField(allow_null=True)
    problems = ExamProblemOut(many=True)
    questions = ExamQuestionOut(many=True)
    submissions = ExamSubmissionOut(many=True, help_text="A page of them, newest first: see submissionsPage.")
    submissionsPage = ListPageOut()


class AnswerIn(serializers.Serializer):
    choices = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=1000), max_length=100)


class AnswerOut(serializers.Serializer):
    questionId = serializers.IntegerField()
    choices = serializers.ListField(child=serializers.IntegerField())


class HandInOut(serializers.Serializer):
    handedInAt = serializers.DateTimeField()
    jobs = serializers.IntegerField(help_text="Judge jobs the hand-in queued.")


class ProblemScoreOut(serializers.Serializer):
    problemId = serializers.IntegerField()
    score = serializers.IntegerField(help_text="The counted submission's 0…100.")
    points = serializers.IntegerField()
    maxPoints = serializers.IntegerField()
    attempts = serializers.IntegerField()


class QuestionScoreOut(serializers.Serializer):
    questionId = serializers.IntegerField()
    points = serializers.IntegerField(allow_null=True)
    maxPoints = serializers.IntegerField()


class ExamResultOut(serializers.Serializer):
    problems = ProblemScoreOut(many=True)
    questions = QuestionScoreOut(many=True)
    total = serializers.IntegerField()
    publishedAt = serializers.DateTimeField(allow_null=True)
    objectiveShown = serializers.BooleanField(
        help_text="false until the exam ends (OI: and is published): the questions' points are null and "
                  "not in the total, so an early hand-in does not reveal the answer key.")


# --- the participant's calls ---------------------------------------------------------------------

def _participation(exam_id: int, user):
    participant = ExamParticipant.objects.select_related("exam").filter(
        exam_id=exam_id, user=user, exam__deleted_at__isnull=True).first()
    if participant is None:
        raise NotFound()  # an exam you are not in does not exist for you
    return participant.exam, participant


def exam_json(exam, participant, *, viewer, now, submissions, states=None) -> dict:
    """`submissions`: the page of the participant's exam submissions to list (`submissions_of`);
    `states`: their `shown_states`, when the caller read them already."""
    answers = {a.question_id: a.choices for a in participant.answers.all()}
    listed = []
    states = states if states is not None else shown_states(submissions, viewer=viewer, now=now)
    for submission, state in zip(submissions, states):
        shown = submission_json(submission, now=now, shown=state)
        listed.append({"submissionType": submission.TYPE, "submissionId": submission.pk,
                       "problemId": submission.problem_id, "createdAt": iso(submission.created_at),
                       "status": shown["status"], "waitReason": shown["waitReason"], "score": shown["score"]})
    return {
        "id": exam.pk, "title": exam.title, "mode": exam.mode, "startsAt": iso(exam.starts_at),
        "endsAt": iso(exam.ends_at), "state": exams.participant_state(exam, participant, now=now),
        "handedInAt": iso(participant.handed_in_at),
        # Before the start the participant sees the exam's times, not its content.
        "problems": [] if now < exam.starts_at else [
            {"problemId": p.problem_id, "title": p.problem.title, "kind": p.problem.kind, "points": p.points}
            for p in exam.problems.select_related("problem")],
        "questions": [] if now < exam.starts_at else [
            {"questionId": q.pk, "kind": q.kind, "prompt": q.prompt, "options": q.options, "points": q.points,
             "choices": answers.get(q.pk, [])} for q in exam.questions.all()],
        "submissions": listed,
    }


def result_json(exam, participant, *, viewer, now) -> dict:
    scores = {s.problem_id: s for s in ExamScore.objects.filter(exam=exam, user_id=participant.user_id)}
    shown = exams.objective_shown(exam, viewer, now=now)
    answers = {a.question_id: a.score for a in participant.answers.all()} if shown else {}
    # Before the start the exam's problems and questions are its secret, here as on its page.
    started = now >= exam.starts_at
    problems = [{"problemId": p.problem_id, "score": getattr(scores.get(p.problem_id), "score", 0),
                 "points": getattr(scores.get(p.problem_id), "points", 0), "maxPoints": p.points,
                 "attempts": getattr(scores.get(p.problem_id), "attempts", 0)}
                for p in (exam.problems.all() if started else ())]
    questions = [{"questionId": q.pk, "points": answers.get(q.pk), "maxPoints": q.points}
                 for q in (exam.questions.all() if started else ())]
    return {"problems": problems, "questions": questions,
            "total": sum(p["points"] for p in problems) + (participant.objective_score if shown else 0),
            "publishedAt": iso(exam.published_at), "objectiveShown": shown}


class ExamView(UserView):
    @extend_schema(tags=TAGS, responses={200: ExamOut}, parameters=PAGE_PARAMETERS,
                   summary="An exam you take: problems, questions, a page of your submissions and your state")
    def get(self, request, exam_id: int):
        exam, participant = _participation(exam_id, request.user)
        pages = ContractPagination()
        page = submissions_of(pages.paginate_queryset(submission_keys(exam=exam, user=request.user), request))
        view = exam_json(exam, participant, viewer=request.user, now=timezone.now(), submissions=page)
        return Response(view | {"submissionsPage": pages.links()})


class AnswerView(UserView):
    @extend_schema(tags=TAGS, request=AnswerIn, responses={200: AnswerOut, **errors(409)},
                   summary="Save your answer to an objective question (409 exam_closed once handed in or over)")
    def put(self, request, exam_id: int, question_id: int):
        data = validated(AnswerIn, request.data)
        answer = exams.exam_answer_save(exam_id=exam_id, question_id=question_id, user=request.user,
                                        choices=data["choices"], now=timezone.now())
        return Response({"questionId": answer.question_id, "choices": answer.choices})


class HandInView(UserView):
    @extend_schema(tags=TAGS, request=None, responses={200: HandInOut, **errors(409)},
                   summary="Hand in: every repeat gets the same confirmation")
    def post(self, request, exam_id: int):
        confirmation = exams.exam_hand_in(exam_id=exam_id, user=request.user, now=timezone.now())
        return Response({"handedInAt": iso(confirmation.handed_in_at), "jobs": confirmation.jobs})


class ExamResultView(UserView):
    @extend_schema(tags=TAGS, responses={200: ExamResultOut, **errors(409)},
                   summary="Your scores per problem and question (ACM: live; OI: once published)")
    def get(self, request, exam_id: int):
        exam, participant = _participation(exam_id, request.user)
        if not exams.results_visible(exam):
            raise NotPublished()
        return Response(result_json(exam, participant, viewer=request.user, now=timezone.now()))


class PracticeProblemOut(serializers.Serializer):
    problemId = serializers.IntegerField()
    title = serializers.CharField()
    bestScore = serializers.IntegerField(allow_null=True)
    bestSubmissionType = serializers.CharField(allow_null=True)
    bestSubmissionId = serializers.IntegerField(allow_null=True)


class PracticeAnswerOut(serializers.Serializer):
    submissionType = serializers.CharField()
    submissionId = serializers.IntegerField()
    problemId = serializers.IntegerField()
    status = serializers.CharField()
    score = serializers.IntegerField(allow_null=True)


class PracticeOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    lessonId = serializers.IntegerField(allow_null=True)
    problems = PracticeProblemOut(many=True)
    answers = PracticeAnswerOut(many=True, help_text="A page of them, newest first: see answersPage.")
    answersPage = ListPageOut()


class PracticeView(UserView):
    @extend_schema(tags=TAGS, responses={200: PracticeOut}, parameters=PAGE_PARAMETERS,
                   summary="A lesson practice: its problems, your best scores and a page of your answers")
    def get(self, request, practice_id: int):
        practice, problems, keys = lessons.practice_view(practice_id=practice_id, user=request.user)
        pages = ContractPagination()
        submissions = submissions_of(pages.paginate_queryset(keys, request))
        now = timezone.now()
        answers = []
        for submission, state in zip(submissions, shown_states(submissions, viewer=request.user, now=now)):
            shown = submission_json(submission, now=now, shown=state)
            answers.append({"submissionType": submission.TYPE, "submissionId": submission.pk,
                            "problemId": submission.problem_id, "status": shown["status"], "score": shown["score"]})
        return Response({
            "id": practice.pk, "title": practice.title, "lessonId": practice.lesson_id,
            "problems": [{"problemId": problem.pk, "title": problem.title,
                          "bestScore": best.best_score if best else None,
                          "bestSubmissionType": (best.best_submission_type or None) if best else None,
                          "bestSubmissionId": best.best_submission_id if best else None}
                         for problem, best in problems],
            "answers": answers, "answersPage": pages.links(),
        })


# --- the admin's calls ---------------------------------------------------------------------------

class ExamProblemIn(serializers.Serializer):
    problemId = serializers.IntegerField(min_value=1, max_value=2**62)
    points = serializers.IntegerField(min_value=0, max_value=100000)


class ExamQuestionIn(serializers.Serializer):
    kind = serializers.ChoiceField(choices=QuestionKind.values)
    prompt = serializers.CharField(max_length=10000)
    options = serializers.ListField(child=serializers.CharField(max_length=1000), min_length=1, max_length=26)
    correct = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=25), min_length=1)
    points = serializers.IntegerField(min_value=0, max_value=100000)


class ExamIn(serializers.Serializer):
    title = serializers.CharField(max_length=200)
    mode = serializers.ChoiceField(choices=ExamMode.values)
    startsAt = serializers.DateTimeField()
    endsAt = serializers.DateTimeField()
    problems = ExamProblemIn(many=True, required=False, default=list)
    questions = ExamQuestionIn(many=True, required=False, default=list)


class ExamPatchIn(serializers.Serializer):
    revision = serializers.IntegerField(min_value=1)
    title = serializers.CharField(max_length=200, required=False)
    startsAt = serializers.DateTimeField(required=False)
    endsAt = serializers.DateTimeField(required=False)


class ExamAdminOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    mode = serializers.CharField()
    startsAt = serializers.DateTimeField()
    endsAt = serializers.DateTimeField()
    publishedAt = serializers.DateTimeField(allow_null=True)
    revision = serializers.IntegerField()
    problems = ExamProblemIn(many=True)
    questionCount = serializers.IntegerField()
    participantCount = serializers.IntegerField()


class ParticipantsIn(serializers.Serializer):
    userIds = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62), min_length=1,
                                    max_length=5000)


class ParticipantsOut(serializers.Serializer):
    added = serializers.IntegerField()
    participantCount = serializers.IntegerField()


def exam_admin_json(exam) -> dict:
    return {"id": exam.pk, "title": exam.title, "mode": exam.mode, "startsAt": iso(exam.starts_at),
            "endsAt": iso(exam.ends_at), "publishedAt": iso(exam.published_at), "revision": exam.revision,
            "problems": [{"problemId": p.problem_id, "points": p.points} for p in exam.problems.all()],
            "questionCount": exam.questions.count(), "participantCount": exam.participants.count()}


class ExamListAdminView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=ExamIn, responses={201: ExamAdminOut},
                   summary="Create an exam with its problems and objective questions")
    def post(self, request):
        data = validated(ExamIn, request.data)
        exam = exams.exam_create(
            title=data["title"], mode=data["mode"], starts_at=data["startsAt"], ends_at=data["endsAt"],
            problems=[{"problem_id": p["problemId"], "points": p["points"]} for p in data["problems"]],
            questions=[dict(q) for q in data["questions"]])
        return Response(exam_admin_json(exam), status=201)


class ExamAdminDetailView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=ExamPatchIn, responses={200: ExamAdminOut, **errors(409)},
                   summary="Change an exam's title or times, based on the revision you read")
    def patch(self, request, exam_id: int):
        data = validated(ExamPatchIn, request.data)
        names = {"title": "title", "startsAt": "starts_at", "endsAt": "ends_at"}
        exam = exams.exam_update(exam_id=exam_id, revision=data["revision"],
                                 changes={names[k]: v for k, v in data.items() if k in names}, now=timezone.now())
        return Response(exam_admin_json(exam))

    @extend_schema(tags=ADMIN_TAGS, request=None, responses={204: OpenApiResponse(description="Deleted.")},
                   summary="Delete an exam: its open jobs are cancelled and late results refused")
    def delete(self, request, exam_id: int):
        exams.exam_delete(exam_id=exam_id, now=timezone.now())
        return Response(status=204)


class ParticipantsView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=ParticipantsIn, responses={200: ParticipantsOut},
                   summary="Add participants to an exam (adding one again changes nothing)")
    def post(self, request, exam_id: int):
        data = validated(ParticipantsIn, request.data)
        added = exams.participants_add(exam_id=exam_id, user_ids=data["userIds"])
        return Response({"added": added,
                         "participantCount": ExamParticipant.objects.filter(exam_id=exam_id).count()})


class PublishView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=None, responses={200: ExamAdminOut},
                   summary="Publish an exam's results to its participants")
    def post(self, request, exam_id: int):
        return Response(exam_admin_json(exams.exam_publish(exam_id=exam_id, now=timezone.now())))


class LessonIn(serializers.Serializer):
    title = serializers.CharField(max_length=200)


class LessonPatchIn(LessonIn):
    revision = serializers.IntegerField(min_value=1)
    title = serializers.CharField(max_length=200, required=False)


class LessonOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    revision = serializers.IntegerField()


class PracticeIn(serializers.Serializer):
    title = serializers.CharField(max_length=200)
    problemIds = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62), max_length=500)


class PracticePatchIn(serializers.Serializer):
    revision = serializers.IntegerField(min_value=1)
    title = serializers.CharField(max_length=200, required=False)
    problemIds = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62), max_length=500,
                                       required=False)


class PracticeAdminOut(serializers.Serializer):
    id = serializers.IntegerField()
    lessonId = serializers.IntegerField()
    title = serializers.CharField()
    revision = serializers.IntegerField()
    problemIds = serializers.ListField(child=serializers.IntegerField())


def _lesson_json(lesson) -> dict:
    return {"id": lesson.pk, "title": lesson.title, "revision": lesson.revision}


def _practice_json(practice) -> dict:
    return {"id": practice.pk, "lessonId": practice.lesson_id, "title": practice.title,
            "revision": practice.revision,
            "problemIds": list(practice.problems.order_by("id").values_list("id", flat=True))}


class LessonListAdminView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=LessonIn, responses={201: LessonOut}, summary="Create a lesson")
    def post(self, request):
        data = validated(LessonIn, request.data)
        return Response(_lesson_json(lessons.lesson_create(title=data["title"])), status=201)


class LessonAdminDetailView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=LessonPatchIn, responses={200: LessonOut, **errors(409)},
                   summary="Rename a lesson, based on the revision you read")
    def patch(self, request, lesson_id: int):
        data = validated(LessonPatchIn, request.data)
        lesson = lessons.lesson_update(lesson_id=lesson_id, revision=data["revision"],
                                       changes={"title": data["title"]} if "title" in data else {})
        return Response(_lesson_json(lesson))


class PracticeListAdminView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=PracticeIn, responses={201: PracticeAdminOut},
                   summary="Create a practice in a lesson, holding problems")
    def post(self, request, lesson_id: int):
        data = validated(PracticeIn, request.data)
        practice = lessons.practice_create(lesson_id=lesson_id, title=data["title"], problem_ids=data["problemIds"])
        return Response(_practice_json(practice), status=201)


class PracticeAdminDetailView(ExamAdminView):
    @extend_schema(tags=ADMIN_TAGS, request=PracticePatchIn, responses={200: PracticeAdminOut, **errors(409)},
                   summary="Change a practice's title or problems, based on the revision you read")
    def patch(self, request, practice_id: int):
        data = validated(PracticePatchIn, request.data)
        names = {"title": "title", "problemIds": "problem_ids"}
        practice = lessons.practice_update(practice_id=practice_id, revision=data["revision"],
                                           changes={names[k]: v for k, v in data.items() if k in names})
        return Response(_practice_json(practice))

    @extend_schema(tags=ADMIN_TAGS, request=None, responses={204: OpenApiResponse(description="Deleted.")},
                   summary="Delete a practice: its open jobs are cancelled and late results refused")
    def delete(self, request, practice_id: int):
        lessons.practice_delete(practice_id=practice_id, now=timezone.now())
        return Response(status=204)
