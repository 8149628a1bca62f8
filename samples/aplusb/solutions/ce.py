# Expected verdict: CE. Syntax error (unclosed parenthesis): python3 -m py_compile rejects it.
import sys

a, b = map(int, sys.stdin.read().split()
print(a + b)
