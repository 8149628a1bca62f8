"""Password sign-in after repeated failures: refused for that account from that address,
with how long, without hashing the password; nobody else is refused."""

from datetime import timedelta

import pytest
from django.contrib.auth.backends import ModelBackend
from django.test import Client
from django.utils import timezone

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "a long passphrase 7"


@pytest.fixture
def alice():
    user = UserFactory(username="alice", is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


def sign_in(client, password, username="alice", path="/accounts/login/"):
    return client.post(path, {"username": username, "password": password, "next": "/"})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_fifth_wrong_password_refuses_the_account_there_even_the_right_one_and_says_for_how_long(alice):
    client = Client(REMOTE_ADDR="127.0.0.2")
    for attempt in range(4):
        wrong = sign_in(client, f"guess {attempt}")
        assert wrong.status_code == 200 and "did not match" in wrong.content.decode()
    assert sign_in(client, "guess 4").status_code == 429
    refused = sign_in(client, PASSWORD)
    assert refused.status_code == 429 and not signed_in(client)
    assert 14 * 60 < int(refused["Retry-After"]) <= 15 * 60
    page = refused.content.decode()
    assert "Too many failed sign-ins for this account from your address. Try again in 15 minutes." in page
    assert 'name="username"' in page and 'value="alice"' in page  # the form, to try again later
    chinese = sign_in(Client(REMOTE_ADDR="127.0.0.2", HTTP_ACCEPT_LANGUAGE="zh-hans"), PASSWORD)
    assert chinese.status_code == 429 and "15 分钟后再试" in chinese.content.decode()


def test_a_refused_try_hashes_no_password(alice, monkeypatch):
    client = Client(REMOTE_ADDR="127.0.0.2")
    for attempt in range(5):
        sign_in(client, f"guess {attempt}")
    checked = []
    authenticate = ModelBackend.authenticate
    monkeypatch.setattr(ModelBackend, "authenticate", lambda self, *a, **k: checked.append(1) or authenticate(
        self, *a, **k))
    assert sign_in(client, "another guess").status_code == 429
    assert checked == []


def test_the_owner_elsewhere_and_other_accounts_at_that_address_still_sign_in(alice):
    guesser = Client(REMOTE_ADDR="127.0.0.2")
    for attempt in range(6):
        sign_in(guesser, f"guess {attempt}")
    bob = UserFactory(username="bob")
    bob.set_password(PASSWORD)
    bob.save()
    classmate = Client(REMOTE_ADDR="127.0.0.2")
    assert sign_in(classmate, PASSWORD, username="bob").status_code == 302 and signed_in(classmate)
    owner = Client(REMOTE_ADDR="127.0.0.3")
    assert sign_in(owner, PASSWORD).status_code == 302 and signed_in(owner)


def test_the_django_admin_sign_in_is_refused_alike(alice):
    client = Client(REMOTE_ADDR="127.0.0.2")
    for attempt in range(3):
        sign_in(client, f"guess {attempt}", path="/django-admin/login/")
    for attempt in range(2):
        sign_in(client, f"guess {attempt}")
    refused = sign_in(client, PASSWORD, path="/django-admin/login/")
    assert refused.status_code == 429 and not signed_in(client)


def test_the_refusal_ends_when_the_page_said_and_a_success_clears_the_count(alice):
    from axes.models import AccessAttempt

    client = Client(REMOTE_ADDR="127.0.0.2")
    for attempt in range(5):
        sign_in(client, f"guess {attempt}")
    assert sign_in(client, PASSWORD).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=15, seconds=1))
    assert sign_in(client, PASSWORD).status_code == 302 and signed_in(client)
    client.post("/accounts/logout/")
    for attempt in range(4):  # the failures before the success are forgotten
        sign_in(client, f"guess {attempt}")
    assert sign_in(client, PASSWORD).status_code == 302 and signed_in(client)
