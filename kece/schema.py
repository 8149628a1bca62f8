"""Schema post-processing: the error statuses of each operation and the envelope every
error uses (API.md, Conventions); and the parts of the schema, by who reads it."""

from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import OpenApiResponse

NODE_API = "/api/v1/internal/"
ADMIN_API = "/api/v1/admin/"


def every_operation(path: str) -> bool:
    return True


def node_operations(path: str) -> bool:
    return path.startswith(NODE_API)


def public_and_user_operations(path: str) -> bool:
    return not path.startswith((NODE_API, ADMIN_API))


class PartialSchemaGenerator(SchemaGenerator):
    """drf-spectacular's generator over only the operations whose path `shows` accepts: the
    document names no other operation, nor the components only they use. (Operation ids do
    not change with the part: the path prefix they are cut from is fixed in the settings.)"""

    def __init__(self, *args, shows=every_operation, **kwargs):
        super().__init__(*args, **kwargs)
        self.shows = shows

    def _get_paths_and_endpoints(self):
        return [endpoint for endpoint in super()._get_paths_and_endpoints() if self.shows(endpoint[0])]

ERROR_DESCRIPTION = "Error (see the code in the body)."

RETRY_AFTER = {"schema": {"type": "integer", "minimum": 0}, "required": True,
               "description": "Seconds to wait before trying again."}

ERROR = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "Machine-readable code, e.g. lease_lost."},
        "detail": {"type": "string", "description": "Text for a person."},
        "fields": {"type": "object", "additionalProperties": True},
    },
}


def errors(*statuses: int) -> dict:
    """The error statuses an operation has beyond the conventions (API.md's "errors" column),
    for its `extend_schema(responses=…)`; `add_contract_parts` gives each the envelope."""
    return {status: OpenApiResponse(description=ERROR_DESCRIPTION) for status in statuses}


def conventional_errors(path: str, method: str, operation: dict) -> set[str]:
    """The error statuses API.md's conventions give an operation by its shape, so that the
    schema names every status the operation can answer and no other:

    1. any request: 413 (a body over 1 MiB, refused before any view), 503 (a dependency down);
    2. a credential or a token: 401; the admin API, or a browser session's unsafe request
       (CSRF): 403;
    3. a path parameter: 404 (no such row, or a value the route does not match);
    4. a body or a query: 400;
    5. the `X-Judge-Session` header: 409 `session_superseded`."""
    schemes = {name for requirement in operation.get("security") or [] for name in requirement}
    parameters = operation.get("parameters") or []
    statuses = {"413", "503"}
    if schemes:
        statuses.add("401")
    if path.startswith("/api/v1/admin/") or ("cookieAuth" in schemes and method != "get"):
        statuses.add("403")
    if "{" in path:
        statuses.add("404")
    if "requestBody" in operation or any(p["in"] == "query" for p in parameters):
        statuses.add("400")
    if any(p["in"] == "header" and p["name"] == "X-Judge-Session" for p in parameters):
        statuses.add("409")
    return statuses


def add_contract_parts(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    envelope = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for status in conventional_errors(path, method, operation):
                responses.setdefault(status, {"description": ERROR_DESCRIPTION})
            for status, response in responses.items():
                if status[0] in "45":
                    response["content"] = envelope
                if status in ("429", "503"):
                    response["headers"] = {"Retry-After": RETRY_AFTER}
            operation["responses"] = responses = dict(sorted(responses.items()))
            if method == "patch":
                _require_revision(result, operation)
            if path.endswith("/artifacts/{digest}") and "content" not in responses.get("200", {"content": 1}):
                responses["200"].update(ARTIFACT_200)
    return result


ARTIFACT_200 = {
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    "headers": {
        "Content-Length": {"schema": {"type": "integer"}, "required": True},
        "X-Content-SHA256": {"schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}, "required": True,
                             "description": "The digest that was asked for."},
    },
}


def _require_revision(result, operation) -> None:
    """drf-spectacular describes PATCH bodies as partial ("Patched…": nothing required), but
    every admin write carries the `revision` it was based on (API.md): a body without it is
    refused, so the schema must say it is required."""
    body = operation.get("requestBody")
    if not body:
        return
    body["required"] = True
    for media in body.get("content", {}).values():
        ref = media.get("schema", {}).get("$ref", "")
        component = result["components"]["schemas"].get(ref.rsplit("/", 1)[-1]) if ref else media.get("schema")
        if component and "revision" in component.get("properties", {}):
            component["required"] = sorted(set(component.get("required", [])) | {"revision"})
