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

USERNAME = "kece-system"


def system_user():
    """The account, created inactive and without a usable password the first time."""
    model = get_user_model()
    user = model.objects.filter(username=USERNAME).first()
    if user is None:
        user, _ = model.objects.get_or_create(username=USERNAME, defaults={"is_active": False})
        if user.has_usable_password():
            user.set_unusable_password()
            user.save(update_fields=["password"])
    return user


def system_user_id() -> int | None:
    """Its id, or None while it does not exist yet (then it owns nothing). Read where it is
    needed, which is never a hot path."""
    return get_user_model().objects.filter(username=USERNAME).values_list("pk", flat=True).first()
