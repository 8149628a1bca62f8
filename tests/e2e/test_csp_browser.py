"""The site's Content-Security-Policy in a real browser: every page is sent with it, and the
pages that run the most of other people's code — the API reference's Swagger UI, Django's
admin — still work under it, with nothing refused. (Every other browser test fails too if
the policy refuses anything on the pages it opens: `tests.browser`.)"""

import pytest
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Permission

from tests.browser import REFUSED, chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.conftest import start_server
from tests.factories import UserFactory

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "csp-test-password"


def admin():
    user = UserFactory(username="csp-admin", is_staff=True, is_superuser=True)
    # The server checks passwords with its own hashers (not the tests' fast one).
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt(), iterations=1000)
    user.save()
    user.user_permissions.add(Permission.objects.get(codename="manage_judgers"))
    return user


@pytest.fixture
def server(tls, tmp_path):
    live = start_server(tls, tmp_path, KECE_IN_PROCESS_SCHEDULER=0)
    yield live
    live.stop()


def test_pages_are_sent_with_a_policy_that_allows_no_inline_script(server):
    policy = requests.get(server.url + "/", timeout=10).headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"


def test_the_api_reference_and_djangos_admin_work_under_it(server, chromium):
    admin()
    page = new_page(chromium)
    sign_in(page, server.url, "csp-admin", PASSWORD, "/api/docs/")
    # Swagger UI drew the operations from the schema: its start-up script ran.
    page.get_by_text("/api/v1/internal/judgers/jobs/claim").first.wait_for()
    screenshot(page, "api-docs-under-csp-1280-en")
    page.goto(server.url + "/django-admin/")
    page.locator("#content-main").wait_for()
    page.goto(server.url + "/django-admin/auth/user/")
    page.locator("#changelist-form").wait_for()
    page.get_by_role("link", name="csp-admin").click()  # a change form, with its widgets' scripts
    page.locator("#user_form").wait_for()
    screenshot(page, "django-admin-under-csp-1280-en")
    page.context.close()
    assert not REFUSED, REFUSED
