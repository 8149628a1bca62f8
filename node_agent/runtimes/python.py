"""Python 3: ``python3 main.py`` under an address-space limit."""

from . import RuntimeSpec

SYNTAX_CHECK = """import sys, traceback
try:
    compile(open("main.py", "rb").read(), "main.py", "exec", dont_inherit=True)
except (SyntaxError, ValueError) as exc:
    sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
    sys.exit(1)
"""

SPEC = RuntimeSpec(
    id="python-r1",
    pool="python",
    source_file="main.py",
    # No byte code is kept, but a syntax error is a compile error (CE), not a crash (RE).
    compile=("python3", "-c", SYNTAX_CHECK),
    run=("python3", "main.py"),
    memory_model="native",
    as_slack_mb=32,
    compile_memory_mb=512,
    env=(("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONHASHSEED", "0")),
    oom_markers=("MemoryError",),
    check=(("python3", "--version"),),
)

CHECK_SOURCE = b"""a, b = map(int, input().split())
print(a + b)
"""
# Must be stopped by the CPU time limit.
CHECK_CPU_HOG = b"""while True:
    pass
"""
# Must be stopped by the memory limit.
CHECK_MEMORY_HOG = b"""blocks = []
while True:
    blocks.append(bytearray(8 << 20))
"""
