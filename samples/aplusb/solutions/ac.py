# Expected verdict: AC. Python integers never overflow.
import sys

a, b = map(int, sys.stdin.read().split())
print(a + b)
