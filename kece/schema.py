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
    return result
