"""Schema post-processing: the error envelope every error uses (API.md, Conventions)."""

ERROR = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "Machine-readable code, e.g. lease_lost."},
        "detail": {"type": "string", "description": "Text for a person."},
        "fields": {"type": "object", "additionalProperties": True},
    },
}


def add_contract_parts(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    ref = {"$ref": "#/components/schemas/Error"}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for status in ("400", "401", "403", "404", "409", "413", "429", "503"):
                responses.setdefault(status, {"description": "Error (see the code in the body).",
                                              "content": {"application/json": {"schema": ref}}})
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
