"""What judging asks of the app above it, which registers the answers at start-up.

`nodes` builds on `judging` (it queues diagnostic jobs, releases leases, reads the job
table); `judging` imports nothing of `nodes` but its models, the rows it locks and leases
to. Where judging needs a node's answer — a diagnostic job settled or failed, a node to be
taken out of service for what it did — it calls a handler that `NodesConfig.ready()`
registered here. Every handler runs inside the caller's transaction, with the rows its
docstring in `nodes` names already locked.
"""

_handlers: dict = {}

DIAGNOSTIC_SETTLED = "diagnostic_settled"  # (job, result, *, now)
DIAGNOSTIC_FAILED = "diagnostic_failed"    # (job, *, now, error, message)
NODE_QUARANTINE = "node_quarantine"        # (node, *, reason, now); the node locked exclusively
JUDGED = "judged"                          # (job, *, now): a judge job's result took effect


def register(**handlers) -> None:
    _handlers.update(handlers)


def call(name: str, *args, **kwargs):
    # A missing handler is a wiring mistake, not a state to carry on in.
    return _handlers[name](*args, **kwargs)
