# Expected verdict: WA. Forgets to convert to int: "1" + "2" is "12".
import sys

a, b = sys.stdin.read().split()
print(a + b)
