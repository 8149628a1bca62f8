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


# What the site's Content-Security-Policy refused on any page a test opened with `new_page`:
# a module's browser tests fail at its end if anything was (an inline style or script that
# the pages still write, a source the policy does not allow).
REFUSED: list[tuple[str, str]] = []


def _note_refusals(page) -> None:
    page.on("console", lambda message: REFUSED.append((page.url, message.text))
            if message.type == "error" and "Content Security Policy" in message.text else None)


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
            REFUSED.clear()
            yield browser
            browser.close()
            assert not REFUSED, f"the Content-Security-Policy refused: {REFUSED}"
    finally:
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


# A page's `wait_for_function` takes a function ("() => …"): an expression alone is polled
# through `eval` in the page, which the site's Content-Security-Policy refuses.
def new_page(browser, *, width: int = 1280, language: str = "en"):
    context = browser.new_context(viewport={"width": width, "height": 900}, locale=language,
                                  extra_http_headers={"Accept-Language": language})
    page = context.new_page()
    _note_refusals(page)
    return page


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
