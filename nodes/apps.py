from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "nodes"

    def ready(self):
        from nodes import schema  # noqa: F401  (OpenAPI auth extension)
