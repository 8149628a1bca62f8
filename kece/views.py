from django.contrib.auth.decorators import permission_required
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.renderers import JSONRenderer

from kece.api import LenientNegotiation
from kece.permissions import MANAGE_JUDGERS


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


# Exempt: routing comes before authentication (API.md), so an unknown API path is a 404 in
# the envelope for every method; without this the CSRF middleware answers an unsafe
# request to it with Django's HTML 403 page first.
@csrf_exempt
def not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse({"error": "not_found", "detail": "No such route."}, status=404)
    return HttpResponse("<!doctype html><title>Not found</title><h1>Not found</h1>", status=404)


def bad_request(request, exception=None):
    # Reached for requests Django refuses before any view, such as a Host header that is
    # not in ALLOWED_HOSTS.
    if _is_api(request):
        return JsonResponse({"error": "invalid", "detail": "Bad request."}, status=400)
    return HttpResponse("<!doctype html><title>Bad request</title><h1>Bad request</h1>", status=400)


def forbidden(request, exception=None):
    if _is_api(request):
        return JsonResponse({"error": "forbidden", "detail": "You may not do this."}, status=403)
    return HttpResponse("<!doctype html><title>Forbidden</title><h1>Forbidden</h1>", status=403)


def server_error(request):
    if _is_api(request):
        return JsonResponse({"error": "unavailable", "detail": "The server could not answer; retry later."},
                            status=503, headers={"Retry-After": "5"})
    return HttpResponse("<!doctype html><title>Error</title><h1>Something went wrong</h1>", status=500)


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema (YAML, or JSON with ?format=json); its errors, like every other
    under /api/, are JSON in the contract's envelope."""

    content_negotiation_class = LenientNegotiation

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400:
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


# The API reference for admins, served with the bundled Swagger UI (no outside CDN).
# Visitors without the permission are sent to settings.LOGIN_URL.
api_docs = permission_required(MANAGE_JUDGERS)(
    SpectacularSwaggerView.as_view(url_name="schema")
)
