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


class ExamParticipantInline(admin.TabularInline):
    model = ExamParticipant
    extra = 0
    readonly_fields = ("handed_in_at", "hand_in_jobs", "objective_score")


@admin.register(Exam)
class ExamAdmin(admin.ModelAdmin):
    list_display = ("title", "mode", "starts_at", "ends_at", "published_at", "deleted_at")
    list_filter = ("mode",)
    readonly_fields = ("revision", "published_at", "deleted_at")
    inlines = [ExamProblemInline, ExamQuestionInline, ExamParticipantInline]


class PracticeInline(admin.TabularInline):
    model = LessonPractice
    extra = 0
    readonly_fields = ("revision", "deleted_at")


@admin.register(Lesson)
class LessonAdmin(admin.ModelAdmin):
    list_display = ("title", "created_at")
    inlines = [PracticeInline]
