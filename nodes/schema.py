"""OpenAPI description of node authentication (registered when the app loads)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    target_class = "judging.auth.NodeCredentialAuthentication"
    name = "nodeCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "The node credential from join; with X-Judge-Session after join/session."}
