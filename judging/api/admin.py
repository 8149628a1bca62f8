"""Admin operations on submissions (rejudge one, or many as a tracked operation; delete) and problems
(delete, who sees it)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from judging.models import SUBMISSION_MODELS, ProblemVisibility, RejudgeOperation
from judging.selectors import judged_provenance, submission_history
from judging.services.bulk_rejudge import rejudge_cancel, rejudge_progress, rejudge_request
from judging.services.problems import problem_visibility_set
from judging.services.rejudge import submission_delete, submission_rejudge
from kece.api import AdminView, iso, validated
from kece.errors import NotFound
from kece.permissions import ManagesExams

TAGS = ["admin"]


class RejudgeOut(serializers.Serializer):
    generation = serializers.IntegerField()


def _checked_type(submission_type: str) -> str:
    if submission_type not in SUBMISSION_MODELS:
        raise NotFound()
    return submission_type


class RejudgeView(AdminView):
    @extend_schema(tags=TAGS, request=None, responses={202: RejudgeOut},
                   summary="Judge a submission again as a new generation")
    def post(self, request, submission_type: str, submission_id: int):
        job = submission_rejudge(submission_type=_checked_type(submission_type), submission_id=submission_id,
                                 now=timezone.now())
        return Response({"generation": job.generation}, status=202)


class AttemptOut(serializers.Serializer):
    leaseEpoch = serializers.IntegerField()
    nodeId = serializers.IntegerField(allow_null=True)
    claimedAt = serializers.DateTimeField(allow_null=True)
    endedAt = serializers.DateTimeField(allow_null=True)
    outcome = serializers.ChoiceField(choices=["SETTLED", "RUNNING", "REQUEUED", "FAILED", "CANCELLED"])
    error = serializers.CharField()


class ProvenanceOut(serializers.Serializer):
    nodeId = serializers.IntegerField(allow_null=True)
    nodeName = serializers.CharField()
    runtimeSpec = serializers.CharField()
    runtimeLabel = serializers.CharField()
    leaseEpoch = serializers.IntegerField(allow_null=True)
    manifestId = serializers.IntegerField(allow_null=True)
    manifestVersion = serializers.IntegerField(allow_null=True)
    manifestDigest = serializers.CharField()
    verdict = serializers.CharField(allow_null=True)
    claimedAt = serializers.DateTimeField(allow_null=True)
    finishedAt = serializers.DateTimeField(allow_null=True)


class GenerationOut(serializers.Serializer):
    jobId = serializers.IntegerField()
    generation = serializers.IntegerField()
    state = serializers.CharField()
    createdAt = serializers.DateTimeField()
    attempts = AttemptOut(many=True)
    provenance = ProvenanceOut(allow_null=True, help_text="Who judged this generation, with what, when; "
                                                          "null until it is judged.")


class SubmissionHistoryOut(serializers.Serializer):
    submissionType = serializers.CharField()
    submissionId = serializers.IntegerField()
    userId = serializers.IntegerField()
    jobs = GenerationOut(many=True)
    provenance = ProvenanceOut(allow_null=True, help_text="The provenance of the verdict the submission shows "
                                                          "(its judged generation's), or null.")


def _provenance_json(provenance: dict | None) -> dict | None:
    if provenance is None:
        return None
    return {**provenance, "claimedAt": iso(provenance["claimedAt"]), "finishedAt": iso(provenance["finishedAt"])}


def _history_json(history: list[dict]) -> list[dict]:
    stamps = ("claimedAt", "endedAt")
    return [{**job, "createdAt": iso(job["createdAt"]), "provenance": _provenance_json(job["provenance"]),
             "attempts": [{**lease, **{k: iso(lease[k]) for k in stamps}} for lease in job["attempts"]]}
            for job in history]


class SubmissionAdminView(AdminView):
    @extend_schema(tags=TAGS, responses={200: SubmissionHistoryOut},
                   summary="A submission's judging history: every generation and every lease it had")
    def get(self, request, submission_type: str, submission_id: int):
        model = SUBMISSION_MODELS[_checked_type(submission_type)]
        submission = model.objects.filter(pk=submission_id).first()
        if submission is None:
            raise NotFound()
        history = _history_json(submission_history(submission))
        return Response({"submissionType": submission.TYPE, "submissionId": submission.pk,
                         "userId": submission.user_id, "jobs": history,
                         "provenance": judged_provenance(submission, history)})

    @extend_schema(tags=TAGS, request=None, responses={204: OpenApiResponse(description="Deleted.")},
                   summary="Delete a submission: its job is cancelled and late results refused")
    def delete(self, request, submission_type: str, submission_id: int):
        submission_delete(submission_type=_checked_type(submission_type), submission_id=submission_id,
                          now=timezone.now())
        return Response(status=204)


class ProblemVisibilityIn(serializers.Serializer):
    visibility = serializers.ChoiceField(choices=ProblemVisibility.values)


class ProblemOut(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    title = serializers.CharField()
    visibility = serializers.ChoiceField(choices=ProblemVisibility.values)


class ProblemAdminView(AdminView):
    def get_permissions(self):
        # Who sees a problem is the teachers' call as much as the admins' (exams).
        return [ManagesExams()] if self.request.method == "PATCH" else super().get_permissions()

    @extend_schema(tags=TAGS, request=None, responses={204: OpenApiResponse(description="Deleted.")},
                   summary="Delete a problem: its submissions' open jobs are cancelled and late results refused")
    def delete(self, request, problem_id: int):
        from judging.services.lessons import problem_delete

        problem_delete(problem_id=problem_id, now=timezone.now())
        return Response(status=204)

    @extend_schema(tags=TAGS, request=ProblemVisibilityIn, responses={200: ProblemOut},
                   summary="Who sees a problem outside its exams: PUBLIC, EXAM_ONLY or HIDDEN (an exam that has "
                           "not ended keeps its problems secret whatever this says)")
    def patch(self, request, problem_id: int):
        data = validated(ProblemVisibilityIn, request.data)
        problem = problem_visibility_set(problem_id=problem_id, visibility=data["visibility"])
        return Response({"id": problem.pk, "slug": problem.slug, "title": problem.title,
                         "visibility": problem.visibility})


class SubmissionRef(serializers.Serializer):
    type = serializers.ChoiceField(choices=list(SUBMISSION_MODELS))
    id = serializers.IntegerField(min_value=1, max_value=2**62)


class BulkRejudgeIn(serializers.Serializer):
    """Exactly one way of choosing: a problem's submissions, what a node judged in a time
    range, or a list."""

    problemId = serializers.IntegerField(min_value=1, max_value=2**62, required=False)
    nodeId = serializers.IntegerField(min_value=1, max_value=2**62, required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    submissions = SubmissionRef(many=True, required=False, allow_empty=False, max_length=10000)

    def validate(self, data):
        ways = [name for name in ("problemId", "nodeId", "submissions") if name in data]
        if len(ways) != 1:
            raise serializers.ValidationError("Give exactly one of problemId, nodeId (with since) or submissions.")
        if ("since" in data or "until" in data) and ways != ["nodeId"]:
            raise serializers.ValidationError({"since": ["only with nodeId"]})
        if ways == ["nodeId"] and "since" not in data:
            raise serializers.ValidationError({"since": ["required with nodeId"]})
        if "until" in data and data["until"] <= data["since"]:
            raise serializers.ValidationError({"until": ["must be after since"]})
        return data


class BulkRejudgeCreatedOut(serializers.Serializer):
    rejudgeId = serializers.IntegerField()
    total = serializers.IntegerField()


class BulkRejudgeOut(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["RUNNING", "DONE", "CANCELLED"])
    total = serializers.IntegerField()
    enqueued = serializers.IntegerField()
    judged = serializers.IntegerField(help_text="Judged again, or skipped as deleted meanwhile.")
    changed = serializers.IntegerField(help_text="Judged again to a different verdict.")
    skipped = serializers.IntegerField(required=False, help_text="Deleted before their turn came.")


class BulkRejudgeListView(AdminView):
    @extend_schema(tags=TAGS, request=BulkRejudgeIn, responses={202: BulkRejudgeCreatedOut},
                   summary="Rejudge many submissions as one tracked operation, at the lowest priority")
    def post(self, request):
        data = validated(BulkRejudgeIn, request.data)
        operation = rejudge_request(selector=dict(data), actor=request.user, now=timezone.now())
        return Response({"rejudgeId": operation.pk, "total": operation.total}, status=202)


def _operation(rejudge_id: int) -> RejudgeOperation:
    operation = RejudgeOperation.objects.filter(pk=rejudge_id).first()
    if operation is None:
        raise NotFound()
    return operation


class BulkRejudgeDetailView(AdminView):
    @extend_schema(tags=TAGS, responses={200: BulkRejudgeOut}, summary="A bulk rejudge and its progress")
    def get(self, request, rejudge_id: int):
        return Response(rejudge_progress(_operation(rejudge_id)))


class BulkRejudgeCancelView(AdminView):
    @extend_schema(tags=TAGS, request=None, responses={200: BulkRejudgeOut},
                   summary="Stop enqueuing a bulk rejudge; what was queued or judged stays")
    def post(self, request, rejudge_id: int):
        return Response(rejudge_progress(rejudge_cancel(rejudge_id=rejudge_id, now=timezone.now())))
