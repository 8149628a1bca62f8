"""`Idempotency-Key` on submit: a network retry is not a second submission.

The key row is inserted in the submit's own transaction (`submission_submit(after_insert=…)`),
so the unique (user, key) index decides between concurrent twins: the second insert waits
for the first transaction and then fails, rolling its submission back, and that request
answers with the first one's submission.
"""

import hashlib
import json
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError

from judging.models import SUBMISSION_MODELS, IdempotencyKey
from kece.errors import IdempotencyConflict, Invalid

MAX_KEY_LENGTH = 128


def body_digest(data: dict) -> str:
    """Of the validated body: an optional field sent as null is the same request as one
    that leaves it out."""
    data = {name: value for name, value in data.items() if value is not None}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def checked_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not 0 < len(raw) <= MAX_KEY_LENGTH or not raw.isprintable() or not raw.isascii():
        raise Invalid(f"Idempotency-Key must be 1…{MAX_KEY_LENGTH} printable ASCII characters.",
                      fields={"Idempotency-Key": ["invalid"]})
    return raw


def form_key() -> str:
    """A key for one rendering of a page's submit form (a hidden field): the same form posted
    twice, by a double click or a reload that posts again, names one submission."""
    return secrets.token_urlsafe(32)


def _key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _original(user, key: str, digest: str):
    row = IdempotencyKey.objects.filter(user=user, key_digest=_key_digest(key)).first()
    if row is None:
        return None
    if row.body_digest != digest:
        raise IdempotencyConflict()
    return SUBMISSION_MODELS[row.submission_type].objects.get(pk=row.submission_id)


def submit_once(submit, *, user, key: str | None, data: dict, now):
    """(submission, created): `submit(after_insert=…)` unless `key` already names one."""
    if key is None:
        return submit(after_insert=None), True
    digest = body_digest(data)
    original = _original(user, key, digest)
    if original is not None:
        return original, False

    def record(submission):
        IdempotencyKey.objects.create(user=user, key_digest=_key_digest(key), body_digest=digest,
                                      submission_type=submission.TYPE, submission_id=submission.pk, created_at=now)

    try:
        return submit(after_insert=record), True
    except IntegrityError:
        original = _original(user, key, digest)  # a concurrent twin committed first
        if original is None:
            raise
        return original, False


def keys_purge(*, now) -> int:
    cutoff = now - timedelta(seconds=settings.KECE_IDEMPOTENCY_TTL_S)
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted
