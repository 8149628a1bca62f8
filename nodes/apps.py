from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "nodes"
