from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path, register_converter
from django.views.decorators.csrf import csrf_exempt
from django.views.i18n import set_language

from judging import exam_pages, lesson_pages
from judging import pages as judging_pages
from judging.api import admin as submission_admin
from judging.api import node as node_jobs
from judging.api.claim import ClaimView
from judging.api.result import ResultView
from judging.api import exams, submissions
from kece import converters, views
from nodes import api as node_admin
from nodes import api_checks, api_node
from pools import views as pool_views

register_converter(converters.IdConverter, "id")
register_converter(converters.SubmissionTypeConverter, "subtype")

internal_api = [
    path("join", api_node.JoinView.as_view()),
    path("session", api_node.SessionView.as_view()),
    path("heartbeat", api_node.HeartbeatView.as_view()),
    path("jobs/claim", ClaimView.as_view(), name="node-claim"),
    path("jobs/renew", node_jobs.RenewView.as_view()),
    path("jobs/<id:job_id>/artifacts/<str:digest>", node_jobs.ArtifactView.as_view()),
    path("jobs/<id:job_id>/result", ResultView.as_view()),
]

admin_api = [
    path("judgers", node_admin.JudgerListView.as_view()),
    path("judgers/<id:node_id>", node_admin.JudgerDetailView.as_view()),
    path("judgers/<id:node_id>/join-code", node_admin.JoinCodeView.as_view()),
    path("judgers/<id:node_id>/revoke", node_admin.RevokeView.as_view()),
    path("judgers/<id:node_id>/rotate", node_admin.RotateView.as_view()),
    path("judgers/<id:node_id>/checks", api_checks.CheckStartView.as_view()),
    path("judgers/<id:node_id>/checks/<id:check_id>", api_checks.CheckDetailView.as_view()),
    path("pools", node_admin.PoolFiguresView.as_view()),
    path("host-groups", node_admin.HostGroupListView.as_view()),
    path("host-groups/<id:group_id>", node_admin.HostGroupDetailView.as_view()),
    path("submissions/<subtype:submission_type>/<id:submission_id>/rejudge", submission_admin.RejudgeView.as_view()),
    path("submissions/<subtype:submission_type>/<id:submission_id>", submission_admin.SubmissionAdminView.as_view()),
    path("problems/<id:problem_id>", submission_admin.ProblemAdminView.as_view()),
    path("exams", exams.ExamListAdminView.as_view()),
    path("exams/<id:exam_id>", exams.ExamAdminDetailView.as_view()),
    path("exams/<id:exam_id>/participants", exams.ParticipantsView.as_view()),
    path("exams/<id:exam_id>/publish", exams.PublishView.as_view()),
    path("lessons", exams.LessonListAdminView.as_view()),
    path("lessons/<id:lesson_id>", exams.LessonAdminDetailView.as_view()),
    path("lessons/<id:lesson_id>/practices", exams.PracticeListAdminView.as_view()),
    path("lessons/practices/<id:practice_id>", exams.PracticeAdminDetailView.as_view()),
    path("rejudges", submission_admin.BulkRejudgeListView.as_view()),
    path("rejudges/<id:rejudge_id>", submission_admin.BulkRejudgeDetailView.as_view()),
    path("rejudges/<id:rejudge_id>/cancel", submission_admin.BulkRejudgeCancelView.as_view()),
]

urlpatterns = [
    path("api/v1/internal/judgers/", include(internal_api)),
    path("api/v1/admin/", include(admin_api)),
    path("api/v1/submissions", submissions.SubmitView.as_view()),
    path("api/v1/submissions/<subtype:submission_type>/<id:submission_id>", submissions.SubmissionView.as_view()),
    path("api/v1/exams/<id:exam_id>", exams.ExamView.as_view()),
    path("api/v1/exams/<id:exam_id>/answers/<id:question_id>", exams.AnswerView.as_view()),
    path("api/v1/exams/<id:exam_id>/hand-in", exams.HandInView.as_view()),
    path("api/v1/exams/<id:exam_id>/result", exams.ExamResultView.as_view()),
    path("api/v1/lessons/practices/<id:practice_id>", exams.PracticeView.as_view()),
    path("api/v1/system/judgers/summary", pool_views.SummaryView.as_view()),
    path("api/schema/", views.SchemaView.as_view(), name="schema"),
    path("api/docs/", views.api_docs, name="api-docs"),
    path("django-admin/", admin.site.urls),
    path("accounts/login/", views.SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Without CSRF: the language form is on pages that every anonymous visitor shares
    # (`pools.views.home`), so it carries no per-visitor token; another site could at worst
    # switch a visitor's language.
    path("i18n/setlang/", csrf_exempt(set_language), name="set_language"),
    path("livez", views.alive, name="livez"),
    path("readyz", views.ready, name="readyz"),
    # Pages
    path("", pool_views.home, name="home"),
    path("status/panel", pool_views.status_panel, name="status-panel"),
    path("", include("nodes.console.urls")),
    path("", include("judging.console.urls")),
    path("problems", judging_pages.problem_list, name="problems"),
    path("exams", exam_pages.exam_list, name="exams"),
    path("lessons", lesson_pages.lesson_list, name="lessons"),
    path("lessons/<id:lesson_id>", lesson_pages.lesson_detail, name="lesson"),
    path("lessons/practices/<id:practice_id>", lesson_pages.practice_detail, name="practice"),
    path("exams/<id:exam_id>", exam_pages.exam_detail, name="exam"),
    path("problems/<id:problem_id>", judging_pages.problem_detail, name="problem"),
    path("submissions", judging_pages.my_submissions, name="my-submissions"),
    path("submissions/<subtype:submission_type>/<id:submission_id>", judging_pages.submission_detail,
         name="submission"),
    path("submissions/<subtype:submission_type>/<id:submission_id>/live", judging_pages.submission_live,
         name="submission-live"),
    # Routing before authentication: any other API path is a 404 in the contract's envelope.
    re_path(r"^api/", views.not_found),
]

handler400 = "kece.views.bad_request"
handler403 = "kece.views.forbidden"
handler404 = "kece.views.not_found"
handler500 = "kece.views.server_error"
