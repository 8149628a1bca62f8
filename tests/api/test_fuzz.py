"""Property-based fuzzing of every operation in the served schema (`/api/schema/`) against a
real uvicorn, authenticated: no request, however malformed, may get a 5xx, and every answer
must be one the schema describes — a documented status, its media type, a body of its
shape and the headers it requires. The schema documents exactly the statuses of API.md
(tests/api/test_schema_contract.py), so an answer the contract does not name fails here.

Node calls carry a live node's bearer credential and its current session; admin and user
calls an admin's DRF token. Half of the generated path ids are pointed at real rows (a
node, a host group, a submission, a job leased to the fuzzing node and one of its files),
so the fuzzer reaches past "not found" into validation and the services.

Bounded and repeatable: derandomized generation (the same cases on every run), no example
database, no shrinking, a fixed number of examples per operation (positive and negative
data), and claims capped at 200 ms by the server's `KECE_CLAIM_WAIT_MS`. Set
`KECE_FUZZ_STATS=1` (with `-s`) to print the status codes each operation answered.
"""

import collections
import hashlib
import os

import hypothesis
import pytest
import schemathesis
from django.utils import timezone
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_headers_conformance,
                                 response_schema_conformance, status_code_conformance)

from judging.models import JudgeJob
from nodes.models import JudgeHostGroup, JudgeNode, NodeCheck
from tests.api.helpers import make_admin, ready_node
from tests.factories import HostGroupFactory, identity_of, make_node, make_problem
from tests.judging.helpers import claim, submit
from tests.live import LiveServer

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

EXAMPLES_PER_OPERATION = 100
NODE_PREFIX = "/api/v1/internal/judgers/"
UNAUTHENTICATED_PATHS = {NODE_PREFIX + "join", "/api/v1/system/judgers/summary"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]


@pytest.fixture(scope="module")
def fuzz_server(django_db_setup, django_db_blocker, tmp_path_factory):
    from tests.conftest import ON_MARIADB

    if not ON_MARIADB:
        pytest.skip("live-server tests need MariaDB/MySQL")
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    # A waiting claim returns within 200 ms whatever waitMs the fuzzer asks for.
    with LiveServer(env={"KECE_CLAIM_WAIT_MS": 200, "KECE_CLAIM_FALLBACK_MS": 100, "KECE_JOIN_THROTTLE": "1000/min"},
                    log_path=log) as live:
        live.log = log
        yield live


class FuzzWorld:
    """The rows and credentials the fuzzed requests use."""

    def __init__(self):
        admin = make_admin("fuzz-admin")
        self.admin_token = Token.objects.create(user=admin).key
        self.node, _ = make_node(pool="python", name="fuzz-node")
        self.target_node, _ = ready_node(pool="cpp", name="fuzz-target")  # admin calls act on this one
        self.group = HostGroupFactory(name="fuzz-group")
        self.problem = make_problem(languages=("python",), cases=2)
        self.submission = submit(admin, self.problem, code="print('fuzz')")
        submit(admin, self.problem, code="print('queued')")
        [self.job] = claim(identity_of(self.node), free_slots=1)
        self.digest = hashlib.sha256(b"print('fuzz')").hexdigest()
        self.check = NodeCheck.objects.create(node=self.target_node, status=NodeCheck.Status.PASSED,
                                              config_revision=1, started_at=timezone.now(),
                                              finished_at=timezone.now())
        self.pins = {
            "node_id": str(self.target_node.pk), "group_id": str(self.group.pk),
            "submission_id": str(self.submission.pk), "job_id": str(self.job.pk), "digest": self.digest,
            "check_id": str(self.check.pk),
        }

    def session_epoch(self) -> int:
        # The fuzzer may open new sessions; always speak for the current one.
        return JudgeNode.objects.values_list("session_epoch", flat=True).get(pk=self.node.pk)

    def headers_for(self, case) -> dict:
        path = case.operation.path
        if path in UNAUTHENTICATED_PATHS:
            return {}
        if path.startswith(NODE_PREFIX):
            headers = {"Authorization": f"Bearer {self.node.secret}", "X-Judge-Session": str(self.session_epoch())}
            lease = (case.headers or {}).get("X-Judge-Lease")
            if lease is not None and coin(lease):
                headers["X-Judge-Lease"] = str(JudgeJob.objects.values_list("lease_epoch", flat=True)
                                               .get(pk=self.job.pk))
            return headers
        return {"Authorization": f"Token {self.admin_token}"}

    def body_pins(self, path) -> dict:
        """Values that let a generated body get past "unknown" into the service."""
        if path == "/api/v1/submissions":
            return {"problemId": self.problem.pk, "language": "python"}
        if path == "/api/v1/admin/judgers":
            return {"pool": "python", "hostGroupId": self.group.pk, "baseUrl": "https://10.0.0.9"}
        if path == "/api/v1/admin/judgers/{node_id}":
            return {"revision": JudgeNode.objects.values_list("revision", flat=True).get(pk=self.target_node.pk)}
        if path == "/api/v1/admin/host-groups/{group_id}":
            return {"revision": JudgeHostGroup.objects.values_list("revision", flat=True).get(pk=self.group.pk)}
        if path == NODE_PREFIX + "jobs/{job_id}/result":
            return {"leaseEpoch": JudgeJob.objects.values_list("lease_epoch", flat=True).get(pk=self.job.pk)}
        return {}

    def pin(self, case) -> None:
        """Point about half of the generated ids and key body fields at real rows. The
        choice is a function of the generated value, so a derandomized run repeats it."""
        parameters = case.path_parameters or {}
        for name, value in list(parameters.items()):
            if name in self.pins and isinstance(value, str) and coin(value):
                parameters[name] = self.pins[name]
        if parameters.get("submission_id") == self.pins["submission_id"] and coin(parameters.get("submission_type")):
            parameters["submission_type"] = "ALGO"
        body = case.body
        if isinstance(body, dict) and coin(body):
            for name, value in self.body_pins(case.operation.path).items():
                if name in body:
                    body[name] = value


def coin(value) -> bool:
    return int(hashlib.sha256(repr(value).encode()).hexdigest(), 16) % 2 == 1


@pytest.fixture
def fuzz_world(fuzz_server):
    return FuzzWorld()


def contract_operations() -> list[str]:
    """The operations the schema describes, read in-process at collection time (one test
    each); the test then fuzzes the same operation as the live server serves it."""
    from drf_spectacular.generators import SchemaGenerator

    document = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(f"{method.upper()} {path}" for path, operations in document["paths"].items()
                  for method in operations if method in ("get", "post", "put", "patch", "delete"))


OPERATIONS = contract_operations()


@pytest.fixture(scope="module")
def served_schema(fuzz_server, django_db_blocker):
    """The whole schema, as an admin reads it (others are served their part of it)."""
    with django_db_blocker.unblock():
        reader = make_admin("fuzz-schema-reader")
        token = Token.objects.create(user=reader)
        try:
            return schemathesis.openapi.from_url(fuzz_server.url + "/api/schema/", timeout=10,
                                                 headers={"Authorization": f"Token {token.key}"})
        finally:
            reader.delete()


def test_the_fuzz_covers_every_served_operation(served_schema):
    served = sorted(op.ok().label for op in served_schema.get_all_operations())
    assert served == OPERATIONS


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_answer_is_one_the_schema_describes_and_none_a_server_error(served_schema, fuzz_world, fuzz_server, label):
    method, path = label.split(" ", 1)
    operation = served_schema[path][method]
    strategy = st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                         operation.as_strategy(GenerationMode.NEGATIVE))
    seen = []

    @hypothesis.settings(max_examples=EXAMPLES_PER_OPERATION, derandomize=True, database=None, deadline=None,
                         phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(case=strategy)
    def fuzz(case):
        fuzz_world.pin(case)
        headers = fuzz_world.headers_for(case)
        response = case.call(base_url=fuzz_server.url, headers=headers, timeout=15)
        seen.append(response.status_code)
        case.validate_response(response, checks=CHECKS, headers=headers)

    fuzz()
    assert seen, "no request was sent"
    if os.environ.get("KECE_FUZZ_STATS"):
        print("fuzz", label, sorted(collections.Counter(seen).items()))
