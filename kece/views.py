import functools

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render, resolve_url
from django.utils.cache import patch_vary_headers
from django.utils.html import escape
from django.utils.translation import get_language
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authentication import SessionAuthentication
from rest_framework.renderers import JSONRenderer

from judging.auth import NodeCredentialAuthentication, NodePrincipal
from kece import health
from kece.api import LenientNegotiation
from kece.permissions import can_manage_judgers, pages_for
from kece.schema import PartialSchemaGenerator, every_operation, node_operations, public_and_user_operations
from kece.tokens import TokenAuthentication



def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def _error(request, status: int, code: str, detail: str, title: str, headers=None, sentence: str = ""):
    """The contract's envelope under /api/, a small page elsewhere: one that needs nothing
    that may have failed (no template, no database), in the visitor's language."""
    if _is_api(request):
        return JsonResponse({"error": code, "detail": detail}, status=status, headers=headers)
    body = (f'<!doctype html><html lang="{escape(get_language() or "en")}"><meta charset="utf-8">'
            f"<title>{escape(title)}</title><h1>{escape(title)}</h1><p>{escape(sentence)}</p></html>")
    return HttpResponse(body, status=status, headers=headers)


def _error_page(request, status: int, title, detail):
    """A page in the site's layout (top bar, language) for refusals a visitor can act on."""
    return render(request, "error.html", {"title": title, "detail": detail}, status=status)


def bad_request(request, exception=None):
    # Reached for requests Django refuses before any view, such as a Host header that is
    # not in ALLOWED_HOSTS.
    return _error(request, 400, "invalid", "Bad request.", _("Bad request"),
                  sentence=_("The server cannot answer this request."))


def forbidden(request, exception=None):
    if not _is_api(request):
        return _error_page(request, 403, _("Forbidden"), _("Your account may not open this page."))
    return _error(request, 403, "forbidden", "You may not do this.", "Forbidden")


def csrf_failure(request, reason=""):
    """A form sent without its valid token, most often from a page left open until its
    session expired: say in the visitor's language that nothing was sent, and how to send
    it again (Django's own page is English, and says nothing of the form)."""
    if _is_api(request):
        return _error(request, 403, "forbidden", "CSRF check failed: send the form's token, or authenticate "
                                                 "with a token.", "Forbidden")
    return _error_page(request, 403, _("The form had expired"),
                       _("Nothing was sent or saved: the page was open too long, or you signed in or out "
                         "meanwhile. Go back, reload the page and send it again."))


# Exempt: routing comes before authentication (API.md), so an unknown API path is a 404 in
# the envelope for every method; without this the CSRF middleware answers an unsafe
# request to it with Django's HTML 403 page first.
@csrf_exempt
def not_found(request, exception=None):
    if not _is_api(request):
        return _error_page(request, 404, _("Not found"), _("There is no such page, or it is not yours to see."))
    return _error(request, 404, "not_found", "No such route.", "Not found")


ALIVE = b"ok\n"  # also what the ASGI router answers itself (`kece.asgi`)


def alive(request):
    """Liveness of this web process: answers without the database or the cache, so a
    supervisor can tell a hung process from a dependency that is down."""
    return HttpResponse(ALIVE, content_type="text/plain", headers={"Cache-Control": "no-store"})


def ready(request):
    """Readiness of this web process (`kece.health`): 503 naming what failed when the
    database or its migrations are not there, or while the process drains; 200, `degraded`,
    without Redis. `?verbose` adds each check with its status and time, and the claims waiting in
    this process."""
    status, body = health.answer(verbose="verbose" in request.GET)
    return JsonResponse(body, status=status, headers={"Cache-Control": "no-store"})


def server_error(request):
    status = 503 if _is_api(request) else 500  # the contract has no 500: a failure is "retry later"
    return _error(request, status, "unavailable", "The server could not answer; retry later.",
                  _("Something went wrong"), headers={"Retry-After": "5"},
                  sentence=_("The server could not answer. Try again in a moment."))


def schema_part(request):
    """Which operations `/api/schema/` describes to this caller: an admin
    (`nodes.manage_judgers`, as for the docs page; staff alone is a teacher) all of them; a
    node, by its credential (`Authorization: Bearer`), the node API; anyone else, signed in
    or not, the public and user API."""
    if isinstance(request.user, NodePrincipal):
        return node_operations
    if can_manage_judgers(request.user):
        return every_operation
    return public_and_user_operations


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema (YAML, or JSON with ?format=json), the part its caller may read
    (`schema_part`); its errors, like every other under /api/, are JSON in the contract's
    envelope (an unknown or revoked credential, an unknown token: 401)."""

    content_negotiation_class = LenientNegotiation

    # A token or the session as on the user API, a node's bearer credential as on the node API.
    authentication_classes = [TokenAuthentication, NodeCredentialAuthentication, SessionAuthentication]

    @extend_schema(exclude=True)  # as drf-spectacular's own view with SERVE_INCLUDE_SCHEMA off
    def get(self, request, *args, **kwargs):
        self.generator_class = functools.partial(PartialSchemaGenerator, shows=schema_part(request))
        return super().get(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400:
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        response = super().finalize_response(request, response, *args, **kwargs)
        # Each caller its own document: no shared cache may hand one to another.
        response["Cache-Control"] = "private"
        patch_vary_headers(response, ["Authorization", "Cookie"])
        return response


# The API reference for admins, served with the bundled Swagger UI (no outside CDN).
# Anonymous → the login page; signed in without the permission → the 403 page (a redirect
# to the login page would send them straight back: they are signed in).
# Split: the page and its start-up script (`?script`) are two answers, so the page needs no
# inline script under the site's Content-Security-Policy.
api_docs = pages_for(can_manage_judgers)(SpectacularSwaggerSplitView.as_view(url_name="schema",
                                                                         template_name="kece_api_docs.html"))


class SignInView(auth_views.LoginView):
    """Django's sign-in page; a visitor already signed in goes where `next` says."""

    redirect_authenticated_user = True

    def get_success_url(self):
        # `next` naming this very page (the Back button after its own "Sign in" link) would
        # send a signed-in visitor round in a loop, which Django refuses with an error: home.
        url = super().get_success_url()
        return resolve_url(settings.LOGIN_REDIRECT_URL) if url == self.request.path else url
