"""The self-check is a judgement the server grades: canary programs with known verdicts."""

import json
import shutil

import pytest
from django.utils import timezone

from judging.models import JobKind, JobState, JudgeJob, Problem, ProblemResult, SettlementEvent
from judging.selectors import job_payload
from judging.services.problems import PackageError, problem_import
from judging.services.settle import SettleRequest
from nodes import canaries
from nodes.checks import checks_expire, node_check_start
from nodes.models import CheckStatus, NodeCheck
from tests.api.helpers import send, token_client
from tests.factories import UserFactory, make_node
from tests.judging.helpers import claim, settle
from tests.nodes.test_checks import _diagnostic_jobs, _items, _run_self_check

pytestmark = pytest.mark.django_db

PYTHON_CANARIES = {"ac.py": "AC", "wa.py": "WA", "tle.py": "TLE", "mle.py": "MLE", "re.py": "RE", "ce.py": "CE"}
OWN_ITEMS = ({"name": "sandbox_isolated", "ok": True, "detail": "bubblewrap"},
             {"name": "filesystems_bounded", "ok": True, "detail": "only size-capped tmpfs"})


def test_a_node_that_judges_every_canary_right_passes_with_an_item_per_program():
    node, check = _run_self_check(own=OWN_ITEMS)
    assert check.status == NodeCheck.Status.PASSED and node.self_check_status == CheckStatus.PASSED
    items = _items(check)
    assert {name: items[name][0] for name in PYTHON_CANARIES} == dict.fromkeys(PYTHON_CANARIES, True)
    assert items["tle.py"][1] == "expected TLE, got TLE in 0 ms"
    assert items["sandbox_isolated"] == (True, "bubblewrap"), "the node's own items are recorded too"
    assert (node.self_check_revision, node.self_check_runtime_spec, node.self_check_agent_version) == (
        node.config_revision, "python-r1", "test")


def test_a_node_that_answers_ac_to_everything_fails_with_the_items_that_differ():
    node, check = _run_self_check(verdicts=dict.fromkeys(PYTHON_CANARIES, "AC"), own=OWN_ITEMS)
    assert check.status == NodeCheck.Status.FAILED and node.self_check_status == CheckStatus.FAILED
    failed = {name: detail for name, (ok, detail) in _items(check).items() if not ok}
    assert failed == {name: f"expected {verdict}, got AC in 0 ms"
                      for name, verdict in PYTHON_CANARIES.items() if verdict != "AC"}


def test_a_wrong_verdict_on_one_canary_fails_the_check_even_when_its_own_items_pass():
    _, check = _run_self_check(verdicts={"mle.py": "RE"}, own=OWN_ITEMS)
    assert check.status == NodeCheck.Status.FAILED
    assert [name for name, (ok, _) in _items(check).items() if not ok] == ["mle.py"]


def test_the_check_waits_for_every_canary_and_a_missing_result_fails_it_when_it_expires():
    node, check = _run_self_check(skip={"re.py"})
    assert check.status == NodeCheck.Status.RUNNING, "one canary has not answered yet"
    NodeCheck.objects.filter(pk=check.pk).update(started_at=timezone.now() - timezone.timedelta(hours=1))
    assert checks_expire(now=timezone.now()) == 1
    check.refresh_from_db()
    items = _items(check)
    assert check.status == NodeCheck.Status.FAILED
    assert items["re.py"] == (False, "expected RE, got no result")
    assert items["ac.py"][0] and items["tle.py"][0], "the canaries that were judged are graded"


def test_a_canary_that_ends_in_an_infrastructure_error_fails_the_check_at_once_with_that_item():
    node, check = _run_self_check(infra="tle.py")
    assert check.status == NodeCheck.Status.FAILED
    assert _items(check)["tle.py"] == (
        False, "expected TLE, got no judgement (INFRA_ERROR sandbox_error: bwrap: permission denied)")
    job = JudgeJob.objects.get(submission_id=check.pk, snapshot__canary__name="tle.py")
    assert (job.state, job.attempts) == (JobState.FAILED, 1), "a diagnostic job is not retried"


def test_an_old_agent_that_runs_its_own_check_for_every_diagnostic_job_fails_and_the_server_copes():
    # What an agent that knows no canaries answers: its own items and AC, whatever the job.
    own = ({"name": "run", "ok": True, "detail": "sum probe: AC"},)
    node, check = _run_self_check(verdicts=dict.fromkeys(PYTHON_CANARIES, "AC"), own=own)
    assert check.status == NodeCheck.Status.FAILED and node.self_check_status == CheckStatus.FAILED
    assert [i["name"] for i in check.items].count("run") == 1


def test_a_failing_own_item_fails_the_check_and_own_items_are_optional():
    broken = ({"name": "filesystems_bounded", "ok": False, "detail": "writable without a bound: /dev"},)
    _, failed = _run_self_check(own=broken)
    assert failed.status == NodeCheck.Status.FAILED
    assert _items(failed)["filesystems_bounded"] == (False, "writable without a bound: /dev")
    _, passed = _run_self_check(own=())
    assert passed.status == NodeCheck.Status.PASSED
    assert _items(passed)["own_checks"][0] is True


def test_a_canary_job_has_the_ordinary_job_shape_bound_to_its_node():
    node, identity = make_node(pool="python")
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    jobs = _diagnostic_jobs(node, check)
    assert [j.snapshot["canary"]["name"] for j in jobs] == list(PYTHON_CANARIES)
    assert {j.bound_node_id for j in jobs} == {node.pk} and {j.kind for j in jobs} == {JobKind.DIAGNOSTIC}
    first = claim(identity)[0]
    payload = job_payload(first, now=timezone.now())
    problem = Problem.objects.get(slug="canary-python")
    assert payload["manifestId"] == problem.current_manifest_id and payload["ownChecks"] is True
    assert payload["limits"] == {"timeLimitMs": 1000, "memoryLimitMb": 128, "outputLimitKb": 1024}
    assert len(payload["cases"]) == 3 and payload["sql"] is None
    source = (canaries.CANARY_ROOT / "python" / "programs" / "ac.py").read_bytes()
    assert payload["source"]["bytes"] == len(source)
    assert [j.snapshot.get("ownChecks") for j in jobs].count(True) == 1


def test_the_mysql_canaries_carry_sql_a_query_a_dml_and_statements_that_must_be_refused():
    node, _ = make_node(pool="mysql")
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    jobs = _diagnostic_jobs(node, check)
    expect = {j.snapshot["canary"]["name"]: j.snapshot["canary"]["expect"] for j in jobs}
    assert expect == {"dml-ac.sql": "AC", "dml-wa.sql": "WA", "dml-refused.sql": "RE",
                      "query-ac.sql": "AC", "query-wa.sql": "WA", "query-refused.sql": "RE"}
    checked = {j.snapshot["canary"]["name"]: j.snapshot["sql"]["check"] is not None for j in jobs}
    assert checked["dml-ac.sql"] and not checked["query-ac.sql"]


def test_canary_jobs_leave_no_statistics():
    _run_self_check()
    assert JudgeJob.objects.filter(kind=JobKind.DIAGNOSTIC, state=JobState.COMPLETED).count() == 6
    assert not SettlementEvent.objects.exists() and not ProblemResult.objects.exists()


# --- the canary problems ------------------------------------------------------------------------

def test_importing_the_same_canary_again_keeps_its_manifest_and_a_changed_one_gets_a_new_version(tmp_path):
    package = tmp_path / "canary"
    shutil.copytree(canaries.CANARY_ROOT / "python", package)
    problem, first = problem_import(package, canary=True)
    assert problem_import(package, canary=True)[1].pk == first.pk
    (package / "cases" / "3.out").write_text("4\n")
    _, changed = problem_import(package, canary=True)
    assert changed.pk != first.pk and changed.version == first.version + 1
    problem.refresh_from_db()
    assert problem.is_canary and problem.current_manifest_id == changed.pk


def test_a_canary_slug_and_a_student_problem_slug_never_mix(tmp_path):
    package = tmp_path / "canary"
    shutil.copytree(canaries.CANARY_ROOT / "python", package)
    problem_import(package, canary=True)
    with pytest.raises(PackageError, match="built-in canary"):
        problem_import(package)
    spec = json.loads((package / "problem.json").read_text())
    (package / "problem.json").write_text(json.dumps({**spec, "slug": "a-student-problem"}))
    problem_import(package)
    with pytest.raises(PackageError, match="student problem"):
        problem_import(package, canary=True)


def test_students_never_see_nor_submit_to_a_canary(client):
    canaries.canaries_for("python")
    problem = Problem.objects.get(slug="canary-python")
    student = UserFactory()
    client.force_login(student)
    assert problem.title not in client.get("/problems").content.decode()
    assert client.get(f"/problems/{problem.pk}").status_code == 404
    refused = send(token_client(student), "POST", "/api/v1/submissions",
                   {"problemId": problem.pk, "language": "python", "code": "print(3)"})
    assert refused.status_code == 400 and refused.json()["fields"]["problemId"] == ["unknown problem"]


def test_every_pool_ships_canaries_with_every_verdict_its_brief_needs():
    for pool in ("cpp", "java", "python", "arkts"):
        verdicts = {c.expect for c in canaries.canaries_for(pool)}
        assert verdicts == {"AC", "WA", "TLE", "MLE", "RE", "CE"}, pool
    assert {c.expect for c in canaries.canaries_for("mysql")} == {"AC", "WA", "RE"}



def test_a_mysql_canary_is_answered_like_a_sql_job_with_its_one_case():
    from judging.services.settle import CaseResult

    node, identity = make_node(pool="mysql")
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    _diagnostic_jobs(node, check)
    job = claim(identity)[0]
    verdict = job.snapshot["canary"]["expect"]
    score = 100 if verdict == "AC" else 0
    status = settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                            verdict=verdict, score=score,
                                            cases=(CaseResult(1, verdict, 3, 0, score),)))
    assert status == "settled"
