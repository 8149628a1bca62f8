"""MySQL/MariaDB spec marker; the judging itself is in ``node_agent.sqljudge``."""

from . import RuntimeSpec

SPEC = RuntimeSpec(id="mysql-r1", pool="mysql")
