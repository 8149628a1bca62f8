"""The one layout-level judge status source: the homepage panel and the top bar both read it.

It wraps the cached snapshot (`pools.snapshot.read`) in what a page shows: the overall state
in words, `k / n` runtimes available, when it was computed, and per runtime a status word,
an icon and the pending count. It never computes a snapshot and never touches the database:
a visitor's request reads one cache key.

Honesty about age: a stale snapshot is shown greyed with "may be out of date"; an unreadable
one shows no runtime as available — never the last green — and says when the last good
snapshot this process saw was taken.
"""

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from pools import snapshot

STATUS_WORDS = {
    "NORMAL": (_("Normal"), "ok"),
    "QUEUEING": (_("Queueing"), "queue"),
    "UNAVAILABLE": (_("Unavailable"), "down"),
    "UNKNOWN": (_("Unknown"), "unknown"),
}

# overall → (words, icon)
OVERALL_WORDS = {
    "all": (_("All available"), "ok"),
    "partial": (_("Partly unavailable"), "queue"),
    "none": (_("Unavailable"), "down"),
    "unknown": (_("Status unknown"), "unknown"),
}


@dataclass(frozen=True)
class RuntimeRow:
    pool: str
    label: str
    status: str  # NORMAL QUEUEING UNAVAILABLE UNKNOWN
    pending: int | None

    @property
    def words(self):
        return STATUS_WORDS[self.status][0]

    @property
    def icon(self):
        return STATUS_WORDS[self.status][1]


@dataclass(frozen=True)
class JudgeStatus:
    freshness: str  # fresh stale unavailable
    overall: str  # all partial none unknown
    ready: int
    total: int
    as_of: datetime | None
    last_good: datetime | None
    rows: tuple[RuntimeRow, ...]

    @property
    def overall_words(self):
        return OVERALL_WORDS[self.overall][0]

    @property
    def overall_icon(self):
        return OVERALL_WORDS[self.overall][1]

    @property
    def known(self) -> bool:
        return self.freshness != "unavailable"

    def row(self, pool: str) -> RuntimeRow | None:
        return next((r for r in self.rows if r.pool == pool), None)

    @property
    def etag(self) -> str:
        """Changes whenever anything shown changes (the announcement compares it too)."""
        return f"{self.freshness}:{self.overall}:{self.ready}:{int(self.as_of.timestamp()) if self.as_of else 0}"


# The newest snapshot time this process has read: what "last good" means when the cache
# itself cannot be read (Redis down), so the page can say since when it knows nothing.
_last_seen: dict[str, datetime] = {}


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def judge_status(*, now=None) -> JudgeStatus:
    now = now or timezone.now()
    data = snapshot.read(now=now)
    as_of = _parse(data.get("asOf"))
    if as_of is not None and (not _last_seen or as_of > _last_seen["as_of"]):
        _last_seen["as_of"] = as_of
    freshness = data["freshness"]
    if freshness == "unavailable":
        rows = tuple(RuntimeRow(p["pool"], p["label"], "UNKNOWN", None) for p in data["pools"])
        return JudgeStatus(freshness, "unknown", 0, data["totalPools"], None, _last_seen.get("as_of"), rows)
    rows = tuple(RuntimeRow(p["pool"], p["label"], p["status"], p["pending"]) for p in data["pools"])
    ready, total = data["readyPools"], data["totalPools"]
    overall = "all" if ready == total else ("none" if ready == 0 else "partial")
    return JudgeStatus(freshness, overall, ready, total, as_of, as_of, rows)
