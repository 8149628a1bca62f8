"""Plain-SQL rows (`kece.rows`): what they write and read is what the ORM would."""

import pytest
from django.utils import timezone
from django.forms.models import model_to_dict

from judging.models import JudgeJob, Submission
from kece import rows
from tests.factories import UserFactory, make_problem

pytestmark = pytest.mark.django_db


def _fields(row) -> dict:
    values = {f.attname: getattr(row, f.attname) for f in type(row)._meta.concrete_fields}
    for moving in ("id", "created_at", "updated_at"):
        values.pop(moving, None)
    return values


def test_an_inserted_row_reads_back_as_the_row_save_would_have_written():
    user, problem = UserFactory(), make_problem(languages=("cpp",), cases=2)
    made = {"user": user, "problem": problem, "language": "cpp", "code": "int main(){}\n",
            "source_digest": "d" * 64, "source_bytes": 13}
    saved = Submission.objects.create(**made)
    inserted = Submission(**made)
    rows.insert(inserted)

    assert inserted.pk is not None and inserted.pk != saved.pk and not inserted._state.adding
    again = Submission.objects.get(pk=inserted.pk)
    assert _fields(again) == _fields(Submission.objects.get(pk=saved.pk))
    assert again.created_at is not None  # auto_now_add


def test_json_and_datetime_fields_survive_the_round_trip():
    problem, user, now = make_problem(languages=("cpp",), cases=3), UserFactory(), timezone.now()
    submission = Submission.objects.create(user=user, problem=problem, language="cpp", code="x",
                                           source_digest="e" * 64, source_bytes=1)
    job = JudgeJob(submission_type="ALGO", submission_id=submission.pk, generation=1, pool="cpp",
                   runtime_spec="cpp-r1", manifest=problem.current_manifest,
                   snapshot={"cases": problem.current_manifest.cases, "note": "中文"}, user_id=user.pk,
                   available_at=now, created_at=now, claim_key=now)
    rows.insert(job)
    rows.update_by_pk(Submission, [submission.pk], {"current_judge_job": job.pk})

    read = JudgeJob.objects.get(pk=job.pk)
    assert read.snapshot == {"cases": problem.current_manifest.cases, "note": "中文"}
    assert model_to_dict(read)["manifest"] == problem.current_manifest.pk
    assert (read.available_at, read.created_at) == (now, now)
    assert Submission.objects.get(pk=submission.pk).current_judge_job_id == job.pk


def _queued_job():
    """A queued job of a new submission, and the time it was queued at."""
    problem, user, now = make_problem(languages=("cpp",), cases=1), UserFactory(), timezone.now()
    submission = Submission.objects.create(user=user, problem=problem, language="cpp", code="x",
                                           source_digest="f" * 64, source_bytes=1)
    job = JudgeJob.objects.create(submission_type="ALGO", submission_id=submission.pk, generation=1, pool="cpp",
                                  runtime_spec="cpp-r1", manifest=problem.current_manifest, snapshot={},
                                  user_id=user.pk, available_at=now, created_at=now, claim_key=now)
    return job, now


def test_many_rows_are_inserted_in_one_statement_and_read_back_whole(django_assert_num_queries):
    from judging.models import SettlementEvent

    job, now = _queued_job()
    events = [SettlementEvent(job=job, event_type=f"kind{i}", payload={"n": i, "text": "分数"}, next_attempt_at=now,
                              created_at=now) for i in range(3)]
    with django_assert_num_queries(1):
        rows.insert_many(events)
    read = SettlementEvent.objects.filter(job=job).order_by("id")
    assert [(e.event_type, e.payload, e.state, e.attempts, e.next_attempt_at) for e in read] == [
        (f"kind{i}", {"n": i, "text": "分数"}, "PENDING", 0, now) for i in range(3)]


def test_rows_given_as_values_are_written_as_the_same_instances_would_be(django_assert_num_queries):
    from judging.models import SettlementEvent

    job, now = _queued_job()
    given = [{"job_id": job.pk, "event_type": f"{kind}{i}", "payload": {"n": i, "text": "分数"},
              "next_attempt_at": now, "created_at": now} for kind in ("a", "b") for i in range(2)]
    rows.insert_many([SettlementEvent(**row) for row in given[:2]])
    with django_assert_num_queries(1):
        rows.insert_values(SettlementEvent, given[2:])

    read = [_fields(e) for e in SettlementEvent.objects.filter(job=job).order_by("id")]
    assert [{**row, "event_type": row["event_type"][1:]} for row in read[2:]] == \
        [{**row, "event_type": row["event_type"][1:]} for row in read[:2]]
    assert read[2]["state"] == "PENDING" and read[2]["attempts"] == 0 and read[2]["last_error"] == ""  # defaults


def test_a_field_that_sets_itself_on_save_must_be_given_as_a_value():
    user, problem = UserFactory(), make_problem(languages=("cpp",), cases=1)
    with pytest.raises(ValueError, match="created_at"):
        rows.insert_values(Submission, [{"user_id": user.pk, "problem_id": problem.pk, "language": "cpp",
                                         "code": "x", "source_digest": "b" * 64, "source_bytes": 1}])
    assert not Submission.objects.filter(user=user).exists()


def test_a_loaded_row_is_the_instance_the_orm_would_load_with_the_rest_deferred(django_assert_num_queries):
    problem, user = make_problem(languages=("cpp",), cases=1), UserFactory()
    submission = Submission.objects.create(user=user, problem=problem, language="cpp", code="int main(){}\n",
                                           source_digest="a" * 64, source_bytes=13)
    whole = rows.shape(Submission)
    [loaded] = whole.load(f"SELECT {whole.columns} FROM {whole.table} WHERE {whole.pk_column} = %s", [submission.pk])
    orm = Submission.objects.get(pk=submission.pk)
    assert loaded == orm and _fields(loaded) == _fields(orm) and loaded.created_at == orm.created_at
    assert not loaded._state.adding and loaded._state.db == "default" and not loaded.get_deferred_fields()

    part = rows.shape(Submission, ("id", "user_id", "verdict"))
    [partial] = part.load(f"SELECT {part.columns} FROM {part.table} WHERE {part.pk_column} = %s", [submission.pk])
    assert (partial.pk, partial.user_id, partial.verdict) == (orm.pk, orm.user_id, orm.verdict)
    assert partial.get_deferred_fields() == Submission.objects.only("id", "user_id", "verdict").get(
        pk=submission.pk).get_deferred_fields()
    with django_assert_num_queries(1):  # a deferred field is read when first touched, as the ORM's are
        assert partial.code == "int main(){}\n"
    partial.verdict = "AC"
    partial.save(update_fields=["verdict"])
    assert Submission.objects.get(pk=submission.pk).verdict == "AC"
