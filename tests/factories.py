"""Factories and the small cast the tests share: node_a and node_b serve one pool,
foreign_node another."""

import itertools
from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from judging import artifacts
from judging.identity import NodeIdentity, credential_digest
from judging.models import LessonPractice, Manifest, Problem
from nodes.models import CheckStatus, DesiredState, JudgeHostGroup, JudgeNode

_seq = itertools.count(1)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests-only")


class HostGroupFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JudgeHostGroup

    name = factory.Sequence(lambda n: f"host-{n}")
    host_id = factory.Sequence(lambda n: f"machine-{n}")
    total_slots = 8


def make_node(*, pool="python", host_group=None, max_slots=4, desired_state=DesiredState.ENABLED,
              heartbeat=True, now=None, name=None):
    """A node that has joined and opened session 1; returns (node, identity)."""
    now = now or timezone.now()
    n = next(_seq)
    secret = f"credential-{n}-{pool}"
    node = JudgeNode.objects.create(
        name=name or f"{pool}-node-{n}", pool=pool, base_url=f"https://127.0.0.1:{8443}",
        host_group=host_group or HostGroupFactory(), max_slots=max_slots, desired_state=desired_state,
        local_slots=max_slots, runtime_spec=f"{pool}-r1", agent_version="test",
        credential_digest=credential_digest(secret), probe_key=f"probe-{n}",
        session_epoch=1, session_open=True, health_ok=True,
        last_heartbeat_at=now if heartbeat else now - timedelta(hours=1),
    )
    if desired_state == DesiredState.ENABLED:
        mark_verified(node)
    node.secret = secret
    return node, NodeIdentity(node.pk, node.credential_digest, node.session_epoch)


def mark_verified(node):
    """As if the node had passed its self-check for what it runs now."""
    node.self_check_status = CheckStatus.PASSED
    node.self_check_revision = node.config_revision
    node.self_check_runtime_spec = node.runtime_spec
    node.self_check_agent_version = node.agent_version
    node.save(update_fields=["self_check_status", "self_check_revision", "self_check_runtime_spec",
                             "self_check_agent_version"])
    return node


def identity_of(node) -> NodeIdentity:
    node.refresh_from_db()
    return NodeIdentity(node.pk, node.credential_digest, node.session_epoch)


def make_problem(*, kind="ALGO", languages=("python", "cpp", "java", "arkts"), cases=2, slug=None,
                 time_limit_ms=1000, memory_limit_mb=256):
    """A problem with a stored manifest of `cases` cases (weights summing to 100)."""
    n = next(_seq)
    slug = slug or f"problem-{n}"
    problem = Problem.objects.create(slug=slug, title=slug, kind=kind)
    case_list, sql = [], None
    if kind == "ALGO":
        weights = [100 // cases] * cases
        weights[-1] += 100 - sum(weights)
        for ordinal, weight in enumerate(weights, start=1):
            case_list.append({
                "ordinal": ordinal, "weight": weight,
                "input": artifacts.store_bytes(f"{ordinal} {n}\n".encode()),
                "output": artifacts.store_bytes(f"{ordinal + n}\n".encode()),
            })
    else:
        languages = ("mysql",)
        sql = {"dialect": "mysql", "ordered": False,
               "schema": artifacts.store_bytes(b"CREATE TABLE t (x INT);"),
               "seed": artifacts.store_bytes(b"INSERT INTO t VALUES (1);"),
               "answer": artifacts.store_bytes(b"SELECT x FROM t;"), "check": None}
    manifest = Manifest.objects.create(problem=problem, version=1, time_limit_ms=time_limit_ms,
                                       memory_limit_mb=memory_limit_mb, languages=list(languages),
                                       cases=case_list, sql=sql)
    problem.current_manifest = manifest
    problem.save()
    return problem


def make_practice(*problems):
    practice = LessonPractice.objects.create(title=f"practice-{next(_seq)}")
    practice.problems.add(*problems)
    return practice


def make_exam(*problems, mode="OI", participants=(), questions=(), points=None, now=None, minutes=60):
    """An exam open from a minute before `now` for `minutes`, holding `problems` (each worth
    `points[i]`, else 100) and `questions` ({kind, options, correct, points})."""
    from judging.models import Exam, ExamParticipant, ExamProblem, ExamQuestion

    now = now or timezone.now()
    exam = Exam.objects.create(title=f"exam-{next(_seq)}", mode=mode, starts_at=now - timedelta(minutes=1),
                               ends_at=now + timedelta(minutes=minutes))
    for index, problem in enumerate(problems):
        ExamProblem.objects.create(exam=exam, problem=problem, points=(points or {}).get(index, 100), ordinal=index)
    for index, question in enumerate(questions):
        ExamQuestion.objects.create(exam=exam, prompt=f"question {index}", ordinal=index, **question)
    for user in participants:
        ExamParticipant.objects.create(exam=exam, user=user)
    return exam
