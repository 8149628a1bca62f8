from django.contrib.auth.decorators import permission_required
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularSwaggerView

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


def server_error(request):
    if _is_api(request):
        return JsonResponse({"error": "unavailable", "detail": "The server could not answer; retry later."},
                            status=503, headers={"Retry-After": "5"})
    return HttpResponse("<!doctype html><title>Error</title><h1>Something went wrong</h1>", status=500)


# The API reference for admins, served with the bundled Swagger UI (no outside CDN).
# Visitors without the permission are sent to settings.LOGIN_URL.
api_docs = permission_required(MANAGE_JUDGERS)(
    SpectacularSwaggerView.as_view(url_name="schema")
)
