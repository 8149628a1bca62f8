"""Django admin: the rows of exams (problems, questions, participants) and of lessons with
their practices. Admins manage them on the site's pages (`judging.console`), through the
services; this is for looking at the rows."""

from django.contrib import admin

from judging.models import Exam, ExamParticipant, ExamProblem, ExamQuestion, Lesson, LessonPractice


class ExamProblemInline(admin.TabularInline):
    model = ExamProblem
    extra = 0


class ExamQuestionInline(admin.StackedInline):
    model = ExamQuestion
    extra = 0


@admin.register(Exam)
class ExamAdmin(admin.ModelAdmin):
    """No participants here: an exam has hundreds or thousands, each a form row with a list of
    every account (a page of minutes and megabytes). They are on the exam's own pages
    (`/admin/exams/<id>`, paged) and in the list below, by exam."""
    list_display = ("title", "mode", "starts_at", "ends_at", "published_at", "deleted_at")
    list_filter = ("mode",)
    readonly_fields = ("revision", "published_at", "deleted_at")
    inlines = [ExamProblemInline, ExamQuestionInline]


@admin.register(ExamParticipant)
class ExamParticipantAdmin(admin.ModelAdmin):
    list_display = ("exam", "user", "handed_in_at", "objective_score")
    list_select_related = ("exam", "user")
    search_fields = ("user__username", "exam__title")
    raw_id_fields = ("exam", "user")
    readonly_fields = ("handed_in_at", "hand_in_jobs", "objective_score")


class PracticeInline(admin.TabularInline):
    model = LessonPractice
    extra = 0
    readonly_fields = ("revision", "deleted_at")


@admin.register(Lesson)
class LessonAdmin(admin.ModelAdmin):
    list_display = ("title", "created_at")
    inlines = [PracticeInline]
