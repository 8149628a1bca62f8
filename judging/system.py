"""The system account: the owner of the submissions no person made.

A hidden canary (`nodes.canaries_hidden`) and a cross-check (`nodes.cross_checks`) are
judged as ordinary JUDGE jobs, so each needs a real submission row: its id comes from the
same table sequence as everyone's, between the ids of the students' submissions of the
moment, and the node sees nothing that tells it apart (a negative id, a range of its own or
a separate table would). Those rows belong to this account, which cannot sign in; nothing
lists another user's submissions to a student, and every cross-user selection that could
reach them (statistics, bulk rejudges) leaves this account out.
"""

from django.contrib.auth import get_user_model
from django.db import IntegrityError, OperationalError

USERNAME = "kece-system"
# MySQL's and MariaDB's "Deadlock found when trying to get lock; try restarting transaction".
DEADLOCK = 1213


def system_user():
    """The account, created inactive and without a usable password the first time.

    Passes that need it at once may all find it missing and insert it together: one insert
    wins, the others fail on the duplicate or, their duplicate checks locking the same gap,
    as a deadlock's victims. Either way the account is there when they look again. Its callers
    fetch it before their transaction: inside one, the failed insert would spoil it."""
    model = get_user_model()
    for _ in range(3):
        user = model.objects.filter(username=USERNAME).first()
        if user is not None:
            return user
        user = model(username=USERNAME, is_active=False)
        user.set_unusable_password()
        try:
            user.save(force_insert=True)
            return user
        except IntegrityError:
            continue
        except OperationalError as exc:
            if exc.args[0] != DEADLOCK:
                raise
    return model.objects.get(username=USERNAME)


def system_user_id() -> int | None:
    """Its id, or None while it does not exist yet (then it owns nothing). Read where it is
    needed, which is never a hot path."""
    return get_user_model().objects.filter(username=USERNAME).values_list("pk", flat=True).first()
