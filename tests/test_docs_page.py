import re

import pytest
import requests
from django.contrib.auth.models import Permission

from tests.factories import UserFactory
from tests.live import LiveServer


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_the_api_docs_page_and_its_assets_load_for_an_admin(tmp_path):
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    admin = UserFactory(username="docs-admin")
    # The server process knows the production hashers, not the fast one the tests use.
    admin.password = PBKDF2PasswordHasher().encode("pw-for-tests-only", "docs-salt", iterations=1000)
    admin.save()
    admin.user_permissions.add(Permission.objects.get(codename="manage_judgers"))
    with LiveServer(env={"DEBUG": 1}, log_path=tmp_path / "server.log") as server:
        browser = requests.Session()
        anonymous = browser.get(server.url + "/api/docs/", allow_redirects=False)
        assert anonymous.status_code == 302 and anonymous.headers["Location"].startswith("/accounts/login/")
        login_page = browser.get(server.url + "/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
        signed_in = browser.post(server.url + "/accounts/login/", data={
            "csrfmiddlewaretoken": token, "username": "docs-admin", "password": "pw-for-tests-only",
            "next": "/api/docs/"}, headers={"Referer": server.url + "/accounts/login/"})
        assert signed_in.status_code == 200 and "swagger" in signed_in.text.lower()
        assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', signed_in.text)
        assert assets, "the page loads its assets from this server, not a CDN"
        for asset in assets:
            assert browser.get(server.url + asset).status_code == 200, asset
        schema = browser.get(server.url + "/api/schema/", headers={"Accept": "application/json"})
        assert schema.status_code == 200 and "/api/v1/internal/judgers/jobs/claim" in schema.text
