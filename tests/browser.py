"""Headless Chromium from Debian, driven by Playwright's Python API (never a downloaded
browser), for tests that use the pages as a person would. Screenshots go to
`test-artifacts/screenshots/`."""

import os
import shutil
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def chromium():
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is required for the browser tests (scripts/setup.sh installs it)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; the test's own ORM
    # calls (setting up rows for the server it drives) are still synchronous code.
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=FLAGS)
            yield browser
            browser.close()
    finally:
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


def new_page(browser, *, width: int = 1280, language: str = "en"):
    context = browser.new_context(viewport={"width": width, "height": 900}, locale=language,
                                  extra_http_headers={"Accept-Language": language})
    return context.new_page()


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# The sign-in form's labels in the language a page was opened with (`new_page`).
SIGN_IN_LABELS = {"en": ("Username", "Password", "Sign in"), "zh-CN": ("用户名", "密码", "登录")}


def sign_in(page, base_url: str, username: str, password: str, next_path: str = "/", *,
            language: str = "en") -> None:
    user_label, password_label, button = SIGN_IN_LABELS[language]
    page.goto(f"{base_url}/accounts/login/?next={next_path}")
    page.get_by_label(user_label).fill(username)
    page.get_by_label(password_label).fill(password)
    page.get_by_role("button", name=button).click()
    page.wait_for_url(f"{base_url}{next_path}")
