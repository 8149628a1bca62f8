"""KECE judge node agent: one process serving one judge pool.

Standalone: it speaks the control plane's HTTP contract and imports nothing from the
server. Run it with ``python -m node_agent``.
"""

AGENT_VERSION = "0.1.0"
PROTOCOL_VERSION = 1
POOLS = ("cpp", "java", "python", "mysql", "arkts")
