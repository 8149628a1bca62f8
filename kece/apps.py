from django.apps import AppConfig


class KeceConfig(AppConfig):
    name = "kece"

    def ready(self):
        from kece import checks  # noqa: F401  (registers system checks)
