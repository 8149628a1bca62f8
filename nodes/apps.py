from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "nodes"

    def ready(self):
        from judging import hooks
        from nodes import checks, cross_checks, quarantine, schema  # noqa: F401  (schema: the OpenAPI auth extension)

        hooks.register(**{hooks.DIAGNOSTIC_SETTLED: checks.self_check_settled,
                          hooks.DIAGNOSTIC_FAILED: checks.self_check_failed,
                          hooks.NODE_QUARANTINE: quarantine.node_quarantine_locked,
                          hooks.JUDGED: cross_checks.judgement_sampled})
