from django.conf import settings
from django.db import models
from django.db.models import F, Q

from pools.registry import POOL_CHOICES


class HostGroupStatus(models.TextChoices):
    ACTIVE = "ACTIVE"
    DISABLED = "DISABLED"


class JudgeHostGroup(models.Model):
    """One physical machine: the nodes on it share its slot budget."""

    name = models.CharField(max_length=100, unique=True)
    host_id = models.CharField(max_length=200)
    total_slots = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=HostGroupStatus.choices, default=HostGroupStatus.ACTIVE)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "judge_host_group"

    def __str__(self):
        return self.name


class DesiredState(models.TextChoices):
    PENDING_VERIFICATION = "PENDING_VERIFICATION"
    ENABLED = "ENABLED"
    DRAINING = "DRAINING"
    DISABLED = "DISABLED"


class ObservedState(models.TextChoices):
    OFFLINE = "offline"
    UNHEALTHY = "unhealthy"
    BUSY = "busy"
    READY = "ready"
    DRAINING = "draining"
    DISABLED = "disabled"
    UNVERIFIED = "unverified"


class CheckStatus(models.TextChoices):
    NONE = "NONE"
    RUNNING = "RUNNING"
    PASSED = "PASSED"
    FAILED = "FAILED"


class JudgeNode(models.Model):
    """One agent process serving one pool, with its own credential, session and slots."""

    pool = models.CharField(max_length=16, choices=POOL_CHOICES)
    # db_constraint=False: InnoDB's foreign-key check takes a shared lock on the parent
    # row, an acquisition the lock helper cannot see or order.
    host_group = models.ForeignKey(JudgeHostGroup, on_delete=models.PROTECT, db_constraint=False, related_name="nodes")
    name = models.CharField(max_length=100, unique=True)
    base_url = models.CharField(max_length=300)
    desired_state = models.CharField(
        max_length=24, choices=DesiredState.choices, default=DesiredState.PENDING_VERIFICATION
    )
    max_slots = models.PositiveIntegerField()
    local_slots = models.PositiveIntegerField(default=0)
    running_reported = models.PositiveIntegerField(default=0)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True, default="")
    runtime_spec = models.CharField(max_length=64, blank=True, default="")
    health_ok = models.BooleanField(default=False)
    health_checks = models.JSONField(default=dict, blank=True)
    self_check_status = models.CharField(max_length=16, choices=CheckStatus.choices, default=CheckStatus.NONE)
    self_check_revision = models.PositiveIntegerField(null=True, blank=True)
    self_check_runtime_spec = models.CharField(max_length=64, blank=True, default="")
    self_check_agent_version = models.CharField(max_length=64, blank=True, default="")
    self_check_finished_at = models.DateTimeField(null=True, blank=True)
    # Bumped when address, pool, host group or image changes: a self-check is only good
    # for the config revision it ran against.
    config_revision = models.PositiveIntegerField(default=1)
    session_epoch = models.PositiveIntegerField(default=0)
    session_open = models.BooleanField(default=False)
    credential_digest = models.CharField(max_length=64, null=True, blank=True, unique=True)
    probe_key = models.CharField(max_length=128, blank=True, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Joined, and not heard from with that credential since (no heartbeat, no session): the
    # join may be made again with its key, its answer having been lost (`node_join`).
    joined_unheard = models.BooleanField(default=False, db_default=False)
    # Quarantine: what the node did (not what it says) took it out of judging until an
    # admin's check passes again (`nodes.quarantine`).
    quarantined_at = models.DateTimeField(null=True, blank=True)
    quarantine_reason = models.CharField(max_length=300, blank=True, default="")
    # What the quarantine rules count: the distinct judge jobs of the node's current run of
    # INFRA_ERROR results (emptied by a judgement), and its renew batches in a row in which
    # every lease came back lost. (A stall is read from the job table: see `nodes.quarantine`.)
    infra_error_jobs = models.JSONField(default=list, blank=True)
    renew_lost_batches = models.PositiveIntegerField(default=0)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "judge_node"
        permissions = [("manage_judgers", "Can register, check, enable, drain and revoke judge nodes")]

    def __str__(self):
        return f"{self.name} ({self.pool})"


def self_check_passed_for_current_config(node) -> bool:
    """A passing self-check that speaks for the node as it is now: same config revision,
    same runtime spec and same agent (image) version as when it ran."""
    return (
        node.self_check_status == CheckStatus.PASSED
        and node.self_check_revision == node.config_revision
        and node.self_check_runtime_spec == node.runtime_spec
        and node.self_check_agent_version == node.agent_version
    )


# The same rule as a query, for reads over many nodes.
VERIFIED = Q(self_check_status=CheckStatus.PASSED, self_check_revision=F("config_revision"),
             self_check_runtime_spec=F("runtime_spec"), self_check_agent_version=F("agent_version"))


def may_take_judge_jobs(node, group) -> bool:
    """Enabled, in an active host group, healthy by its last heartbeat, not quarantined and
    verified for what it runs now. Anything else gets only its own diagnostic jobs.

    These rules sit with the columns they read: the claim (in `judging`) applies them
    without importing node services."""
    return (node.desired_state == DesiredState.ENABLED and group.status == HostGroupStatus.ACTIVE
            and node.health_ok and node.quarantined_at is None and self_check_passed_for_current_config(node))


class JoinCode(models.Model):
    node = models.ForeignKey(JudgeNode, on_delete=models.CASCADE, db_constraint=False, related_name="join_codes")
    code_digest = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    # sha-256 of the `joinKey` the join that used the code came with ("" if none): the same
    # key may join again while the node has not been heard from since (its answer was lost).
    join_key_digest = models.CharField(max_length=64, blank=True, default="", db_default="")
    # The agent's count of its tries of that join: a later try may join again, never an
    # earlier one arriving late (it would replace the credential the agent now holds).
    join_attempt = models.PositiveIntegerField(default=0, db_default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "judge_join_code"


class NodeAudit(models.Model):
    """Who changed which node, from what to what, on which revision, when."""

    node = models.ForeignKey(JudgeNode, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False,
                             related_name="audit")
    host_group = models.ForeignKey(JudgeHostGroup, null=True, blank=True, on_delete=models.SET_NULL,
                                   db_constraint=False, related_name="audit")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, blank=True, default="")
    action = models.CharField(max_length=40)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    revision = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "judge_node_audit"
        ordering = ["-created_at", "-id"]


class NodeCheck(models.Model):
    """One run of the connectivity check followed by the node's self-check."""

    class Status(models.TextChoices):
        RUNNING = "RUNNING"
        PASSED = "PASSED"
        FAILED = "FAILED"

    node = models.ForeignKey(JudgeNode, on_delete=models.CASCADE, db_constraint=False, related_name="checks")
    kind = models.CharField(max_length=32, default="connectivity+self-check")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    items = models.JSONField(default=list, blank=True)
    config_revision = models.PositiveIntegerField()
    runtime_spec = models.CharField(max_length=64, blank=True, default="")
    agent_version = models.CharField(max_length=64, blank=True, default="")
    job_id = models.BigIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "judge_node_check"
        ordering = ["-started_at", "-id"]


class HiddenCanary(models.Model):
    """A canary program slipped into a node's ordinary work (`nodes.canaries_hidden`): a
    JUDGE job bound to the node, for a submission of the system account, graded by the
    server against `expect` once it settles. Never shown to students, never counted."""

    node = models.ForeignKey(JudgeNode, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    job_id = models.BigIntegerField(unique=True)
    program = models.CharField(max_length=100)
    expect = models.CharField(max_length=16)
    # How many of the node's judge jobs the next canary waits for (random around the rate,
    # so a node cannot count its way to the canary).
    next_after = models.PositiveIntegerField()
    planted_at = models.DateTimeField()
    verdict = models.CharField(max_length=16, blank=True, default="")
    # Null until graded; then whether the node's verdict was the expected one.
    ok = models.BooleanField(null=True)
    graded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "judge_hidden_canary"
        indexes = [models.Index(fields=["node", "planted_at"], name="hidden_canary_node"),
                   models.Index(fields=["graded_at", "id"], name="hidden_canary_ungraded")]


class CrossCheck(models.Model):
    """A settled judge job judged again, hidden, on another node of its pool
    (`nodes.cross_checks`): both verdicts and scores, and whether they agree."""

    original_job_id = models.BigIntegerField(unique=True)
    original_node = models.ForeignKey(JudgeNode, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    original_verdict = models.CharField(max_length=16)
    original_score = models.PositiveSmallIntegerField(null=True)
    # Null until the periodic step has found a peer and queued the check job.
    check_job_id = models.BigIntegerField(unique=True, null=True, blank=True)
    check_node = models.ForeignKey(JudgeNode, null=True, blank=True, on_delete=models.CASCADE, db_constraint=False,
                                   related_name="+")
    check_verdict = models.CharField(max_length=16, blank=True, default="")
    check_score = models.PositiveSmallIntegerField(null=True)
    # Null until the check job is judged (and when it never was: no peer, cancelled, failed).
    agreed = models.BooleanField(null=True)
    # The node a failed canary showed to be lying, when one did: the disagreement then no
    # longer counts against the other.
    blamed_node_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    # When it ended: judged, or given up (`agreed` null then).
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "judge_cross_check"
        indexes = [models.Index(fields=["original_node", "agreed", "settled_at"], name="cross_check_original"),
                   models.Index(fields=["check_node", "agreed", "settled_at"], name="cross_check_checker"),
                   models.Index(fields=["settled_at", "id"], name="cross_check_open")]
