"""The one place that takes row locks.

Every `select_for_update` in KECE goes through here. Rows are always locked through their
primary key (the claim's SKIP LOCKED scan aside, which never waits), and job rows are
updated only after they are locked, by primary key. Within one transaction rows are acquired in the global order

    host group → node → problem / practice → exam participant → submission → job
    → settlement event → derived row

and, inside one rank, by ascending key. Two paths that both follow this order cannot
deadlock on each other. With `KECE_LOCK_ORDER_CHECK` on (always in tests) an acquisition
that would go backwards raises `LockOrderViolation` before it reaches the database;
otherwise it is logged.

Locks on rows already held in this transaction are free and do not count.
"""

import logging
from enum import IntEnum
from typing import NamedTuple

from django.conf import settings

from kece.rows import database
from kece.rows import shape as shape_of
from kece.rows import fetch_each, insert_if, matching, update_by_pk, update_rows

logger = logging.getLogger("kece.locking")


class Rank(IntEnum):
    HOST_GROUP = 1
    NODE = 2
    PARENT = 3  # a problem or a lesson practice, as what submissions name
    EXAM_PARTICIPANT = 4
    SUBMISSION = 5
    JOB = 6
    EVENT = 7
    DERIVED = 8


class LockOrderViolation(RuntimeError):
    pass


class _TransactionLocks:
    __slots__ = ("held", "last")

    def __init__(self):
        self.held: set[tuple] = set()
        self.last: tuple | None = None  # (rank, key) of the greatest acquisition so far


def _outermost_block():
    # Test cases wrap each test in atomic blocks of their own; the service's transaction is
    # the first block that is not one of those.
    for block in database().atomic_blocks:
        if not getattr(block, "_from_testcase", False):
            return block
    return None


def _state() -> _TransactionLocks:
    block = _outermost_block()
    if block is None:
        raise LockOrderViolation("row locks may only be taken inside transaction.atomic()")
    state = getattr(block, "_kece_locks", None)
    if state is None:
        state = block._kece_locks = _TransactionLocks()
    return state


def _acquire(rank: Rank, keys, *, waits: bool = True) -> list:
    """Record the acquisition of `keys` at `rank`; return the keys not yet held, sorted.

    An acquisition that never waits (SKIP LOCKED) cannot close a deadlock cycle, so its
    order is not checked; what it took still counts as held for the locks that follow.
    """
    state = _state()
    fresh = sorted({k for k in keys if (rank, k) not in state.held})
    if not fresh:
        return fresh
    first = (int(rank), fresh[0])
    if waits and state.last is not None and first <= state.last:
        held_rank = Rank(state.last[0]).name
        message = (
            f"lock order violation: {rank.name} {fresh[0]!r} requested after {held_rank} {state.last[1]!r} "
            "(order is host group → node → problem/practice → exam participant → submission → job → event → derived,"
            " ascending keys)"
        )
        if settings.KECE_LOCK_ORDER_CHECK:
            raise LockOrderViolation(message)
        logger.error(message)
    state.held.update((rank, k) for k in fresh)
    state.last = max(state.last or first, (int(rank), fresh[-1]))
    return fresh


def _lock_clause(connection, *, shared: bool = False) -> str:
    if not connection.features.has_select_for_update:
        return ""  # SQLite: the write transaction (IMMEDIATE) already excludes other writers
    if shared and connection.vendor == "mysql":
        return " LOCK IN SHARE MODE"
    return " FOR UPDATE"


class RowLock(NamedTuple):
    """Rows to lock by primary key, as one `lock_together` step: recorded at `rank` under
    `keys`; `one`: a single row (or None), else a dict of the rows found by key."""
    model: type
    rank: Rank
    keys: tuple
    pks: tuple
    shared: bool = False
    names: tuple | None = None
    one: bool = False


def _rows_of(model, rank: Rank, pks, *, names: tuple | None = None) -> RowLock:
    return RowLock(model, rank, tuple(pks), tuple(pks), names=names)


def _row_of(model, rank: Rank, pk, *, key=None, shared: bool = False, names: tuple | None = None) -> RowLock:
    """One row by primary key, recorded at `rank` under `key` (the primary key unless the
    rank orders by more)."""
    return RowLock(model, rank, (pk if key is None else key,), (pk,), shared, names, one=True)


def _statement(lock: RowLock, connection):
    keys = sorted(set(lock.pks))
    found = shape_of(lock.model, lock.names, connection)
    placeholders = ", ".join(["%s"] * len(keys))
    sql = (f"SELECT {found.columns} FROM {found.table} WHERE {found.pk_column} IN ({placeholders})"
           f" ORDER BY {found.pk_column}{_lock_clause(connection, shared=lock.shared)}")
    return sql, keys, found


def lock_together(*locks: RowLock, reads=()) -> list:
    """Take `locks` in the order given, which must be the global order: what each would take
    alone (a row or None, a dict by key), with every statement sent in one round trip
    where the database allows (`kece.rows.fetch_each`): the server takes the locks one
    after another, as it would have. An order violation raises before anything is sent.

    `reads`, statements `(sql, params)` that take no lock, go after the locks in the same
    round trip, and so see what is committed once the locks are held: their rows follow
    the locks' in the answer."""
    for lock in locks:
        _acquire(lock.rank, lock.keys)
    connection = database()
    planned = [_statement(lock, connection) for lock in locks if lock.pks]
    statements = [(sql, keys) for sql, keys, _ in planned] + list(reads)
    rows_each = fetch_each(statements, connection) if statements else []
    by_lock = iter([found.build(row, connection) for row in rows]
                   for (_, _, found), rows in zip(planned, rows_each))
    taken = []
    for lock in locks:
        rows = next(by_lock) if lock.pks else []
        taken.append((rows[0] if rows else None) if lock.one else {row.pk: row for row in rows})
    return taken + rows_each[len(planned):]


def _lock_by_pk(model, rank: Rank, pks, *, names: tuple | None = None) -> dict:
    [rows] = lock_together(_rows_of(model, rank, pks, names=names))
    return rows


def _lock_one(model, rank: Rank, pk, *, key=None, shared: bool = False, names: tuple | None = None):
    [row] = lock_together(_row_of(model, rank, pk, key=key, shared=shared, names=names))
    return row


# --- host groups and nodes -----------------------------------------------------------------

def host_group_row(pk, *, shared: bool = False) -> RowLock:
    """A host group row. `shared` is for a result post's one-for-one replacement
    (`judging.services.settle`): many of them run side by side, while a claim that may raise
    the group's count, and any change to the group, take it exclusively. A shared holder
    must not write the row."""
    from nodes.models import JudgeHostGroup

    return _row_of(JudgeHostGroup, Rank.HOST_GROUP, pk, shared=shared)


def lock_host_group(pk, *, shared: bool = False):
    [group] = lock_together(host_group_row(pk, shared=shared))
    return group


def node_row(pk, *, shared: bool = False) -> RowLock:
    """A node row. `shared` lets many settles and renewals of one node run side by side
    while still excluding what takes it exclusively (claim, session change, drain, revoke):
    they only need the node's session and credential not to change under them. A shared
    holder must not write the node row (two holders upgrading would deadlock)."""
    from nodes.models import JudgeNode

    return _row_of(JudgeNode, Rank.NODE, pk, shared=shared)


def lock_node(pk, *, shared: bool = False):
    [node] = lock_together(node_row(pk, shared=shared))
    return node


def lock_nodes(pks) -> dict:
    """Lock several node rows exclusively, in ascending order (two nodes that disagreed on a
    verdict are judged together: `nodes.cross_checks`)."""
    from nodes.models import JudgeNode

    return _lock_by_pk(JudgeNode, Rank.NODE, pks)


# --- problems and practices ----------------------------------------------------------------------

def lock_parent(model, pk, *, shared: bool = False, names: tuple | None = None):
    """Lock the problem or lesson practice row a submission names. A submit holds it shared
    while it checks the row is not deleted and writes the submission; a deletion takes it
    exclusively to mark it deleted, so it waits for the submits in flight, and every later
    submit sees the mark: its sweep of the submissions then misses none. `names`: the only
    fields to read (the others are deferred)."""
    return _lock_one(model, Rank.PARENT, pk, key=(model._meta.db_table, pk), shared=shared, names=names)


def insert_under_live_parent(row, model, pk) -> bool:
    """Insert `row` (a submission) in the statement that locks the parent row `pk` of `model`
    shared, as `lock_parent(shared=True)` does, and finds it not deleted: one statement for
    the two. The lock is taken as the statement reads the parent, before it writes the new
    row, so nothing a submission could be locked behind comes first. Whether the parent was
    live (only then is `row` inserted)."""
    _acquire(Rank.PARENT, [(model._meta.db_table, pk)])
    connection = database()
    parent = shape_of(model, ("id", "deleted_at"), connection)
    deleted_at = connection.ops.quote_name(model._meta.get_field("deleted_at").column)
    return insert_if(row, f"{parent.table} WHERE {parent.pk_column} = %s AND {deleted_at} IS NULL"
                          f"{_lock_clause(connection, shared=True)}", [pk])


# --- exam participants -------------------------------------------------------------------------

def lock_exam_participants(pks) -> dict:
    """Lock exam participant rows: a participant's submits, answers and hand-in (and an
    exam's deletion, which takes all of them) queue here, before any submission."""
    from judging.models import ExamParticipant

    return _lock_by_pk(ExamParticipant, Rank.EXAM_PARTICIPANT, pks)


def lock_exam_participant(pk):
    return lock_exam_participants([pk]).get(pk)


# --- submissions ------------------------------------------------------------------------------

_TYPE_ORDER = {"ALGO": 0, "SQL": 1}


def submission_row(submission_type: str, submission_id: int, *, names: tuple | None = None) -> RowLock:
    """One submission (code or SQL). Keys order ALGO before SQL, then by id. `names`: the
    only fields to read (the others are deferred)."""
    from judging.models import SUBMISSION_MODELS

    return _row_of(SUBMISSION_MODELS[submission_type], Rank.SUBMISSION, submission_id,
                   key=(_TYPE_ORDER[submission_type], submission_id), names=names)


def lock_submission(submission_type: str, submission_id: int, *, names: tuple | None = None):
    [submission] = lock_together(submission_row(submission_type, submission_id, names=names))
    return submission


# --- jobs ----------------------------------------------------------------------------------------

def job_rows(pks, *, names: tuple | None = None) -> RowLock:
    """Job rows by key; `names`: the only fields to read (the others are deferred)."""
    from judging.models import JudgeJob

    return _rows_of(JudgeJob, Rank.JOB, pks, names=names)


def lock_jobs(pks, *, names: tuple | None = None) -> dict:
    [jobs] = lock_together(job_rows(pks, names=names))
    return jobs


def lock_job(pk):
    return lock_jobs([pk]).get(pk)


def claim_queued_jobs(where: str, params, limit: int) -> list:
    """`SELECT … FROM judge_job WHERE <where> ORDER BY claim_key, id LIMIT n FOR UPDATE
    SKIP LOCKED`: whole job rows, ready to lease.

    Rows another transaction holds are skipped, not waited for, so concurrent claimers
    each take different jobs without queueing behind each other. Rows this transaction
    holds are skipped too (the database would hand them over): a job just settled and
    requeued in it goes to the next claim, not back to the node that gave it up.
    """
    from judging.models import JudgeJob

    if limit <= 0:
        return []
    held = sorted(key for rank, key in _state().held if rank == Rank.JOB)
    if held:
        where = f"({where}) AND id NOT IN ({', '.join(['%s'] * len(held))})"
        params = [*params, *held]
    connection = database()
    shape = shape_of(JudgeJob, connection=connection)
    features = connection.features
    # Without SKIP LOCKED (an older server) claimers wait for each other instead: slower,
    # never wrong. Without row locks at all (SQLite) the write transaction excludes them.
    lock = (" FOR UPDATE SKIP LOCKED" if features.has_select_for_update_skip_locked
            else " FOR UPDATE" if features.has_select_for_update else "")
    jobs = shape.load(f"SELECT {shape.columns} FROM {shape.table} WHERE {where}"
                      f" ORDER BY claim_key, {shape.pk_column} LIMIT %s{lock}", [*params, limit], connection)
    # The database chose the rows; record them so a later lower-ranked lock in this
    # transaction is still caught.
    _acquire(Rank.JOB, [job.pk for job in jobs], waits=False)
    return jobs


def _require_held(keys) -> None:
    state = _state()
    missing = [key for key in keys if key not in state.held]
    if missing:
        raise LockOrderViolation(f"write to rows {missing} that this transaction has not locked")


def update_locked_jobs(pks, *, increment=(), **values) -> None:
    """UPDATE job rows this transaction has locked, by primary key only; `increment` names
    counters to raise by one.

    Guards are checked in Python on the locked rows, never in the UPDATE's WHERE: a WHERE on
    other columns may lead the optimiser to a secondary index, which InnoDB then locks
    before the row itself — the reverse of every path that locks the row first and then
    changes an indexed column, and so a deadlock.
    """
    from judging.models import JudgeJob

    keys = sorted(set(pks))
    _require_held([(Rank.JOB, pk) for pk in keys])
    if keys:
        update_by_pk(JudgeJob, keys, values, increment)


def update_locked_node(pk, **values) -> None:
    """UPDATE the node row this transaction has locked (exclusively: a shared holder must not
    write it), by primary key only."""
    from nodes.models import JudgeNode

    _require_held([(Rank.NODE, pk)])
    update_by_pk(JudgeNode, [pk], values)


def _held_key(row):
    from judging.models import SUBMISSION_MODELS, ExamParticipant, JudgeJob

    if isinstance(row, JudgeJob):
        return (Rank.JOB, row.pk)
    if isinstance(row, ExamParticipant):
        return (Rank.EXAM_PARTICIPANT, row.pk)
    [kind] = [k for k, model in SUBMISSION_MODELS.items() if isinstance(row, model)]
    return (Rank.SUBMISSION, (_TYPE_ORDER[kind], row.pk))


def _saved_values(row, fields) -> dict:
    """`fields` of `row` as `save` would write them (auto-now fields take the time)."""
    return {name: type(row)._meta.get_field(name).pre_save(row, False) for name in fields}


def save_locked(row, fields) -> None:
    """Write `fields` of a job, submission or exam participant this transaction has locked:
    `save(update_fields=…)` as one plain UPDATE by primary key (auto-now fields take the
    time, as in `save`)."""
    _require_held([_held_key(row)])
    update_by_pk(type(row), [row.pk], _saved_values(row, fields))


def save_locked_together(*rows_and_fields) -> None:
    """`save_locked` for several `(row, fields)` at once, in one statement (`update_rows`):
    a settle writes its job and its submission together."""
    _require_held([_held_key(row) for row, _ in rows_and_fields])
    update_rows([(type(row), row.pk, _saved_values(row, fields)) for row, fields in rows_and_fields])


# --- settlement events and derived rows ----------------------------------------------------------

def lock_due_event(pk):
    """Lock one settlement event unless another dispatcher holds it (then None)."""
    from judging.models import SettlementEvent

    _acquire(Rank.EVENT, [pk])
    return SettlementEvent.objects.select_for_update(skip_locked=True).filter(pk=pk).first()


def lock_due_events(pks) -> list:
    """Lock the settlement events of `pks` that no other dispatcher holds, by ascending
    key, never waiting: the ones locked, still PENDING."""
    from judging.models import EventState, SettlementEvent

    keys = sorted(set(pks))
    if not keys:
        return []
    _acquire(Rank.EVENT, keys, waits=False)
    rows = SettlementEvent.objects.select_for_update(skip_locked=True).filter(pk__in=keys).order_by("pk")
    return [row for row in rows.only("pk", "state") if row.state == EventState.PENDING]


def lock_event(pk):
    from judging.models import SettlementEvent

    return _lock_by_pk(SettlementEvent, Rank.EVENT, [pk]).get(pk)


def lock_derived_rows(model, fields: tuple, keys) -> dict:
    """Lock, creating those missing, the derived rows of `model` whose `fields` hold each of
    `keys`: {key: row}. One upsert takes them all, exclusively and by ascending key (the
    order its rows are written in), as `lock_derived` would one at a time; then one read."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    _acquire(Rank.DERIVED, [(model._meta.db_table,) + tuple(key) for key in keys])
    connection = database()
    # The upsert, not a SELECT … FOR UPDATE first: see `lock_derived`.
    extra = {"unique_fields": list(fields)} if connection.features.supports_update_conflicts_with_target else {}
    model.objects.bulk_create([model(**dict(zip(fields, key))) for key in keys], update_conflicts=True,
                              update_fields=list(fields[:1]), **extra)
    found = shape_of(model, connection=connection)
    where, params = matching(model, fields, keys, connection)
    order = ", ".join(connection.ops.quote_name(model._meta.get_field(name).column) for name in fields)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    rows = found.load(f"SELECT {found.columns} FROM {found.table} WHERE {where} ORDER BY {order}{lock}", params,
                      connection)
    return {tuple(getattr(row, name) for name in fields): row for row in rows}


def lock_derived(model, key: tuple, **lookup):
    """Lock (creating if needed) the derived row of `model` identified by `lookup`.

    `key` orders derived rows of different models within one transaction.
    """
    _acquire(Rank.DERIVED, [(model._meta.db_table,) + tuple(key)])
    row = model.objects.select_for_update().filter(**lookup).first()
    if row is None:
        # An upsert, not INSERT IGNORE: IGNORE takes a shared lock on a row another
        # transaction just inserted, and two such sharers upgrading to FOR UPDATE deadlock.
        # ON DUPLICATE KEY UPDATE takes the exclusive lock straight away.
        fields = list(lookup)
        extra = {"unique_fields": fields} if database().features.supports_update_conflicts_with_target else {}
        model.objects.bulk_create([model(**lookup)], update_conflicts=True, update_fields=fields[:1], **extra)
        row = model.objects.select_for_update().get(**lookup)
    return row
