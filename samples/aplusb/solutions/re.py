# Expected verdict: RE. The list has one element; values[1] raises IndexError, which ends
# the interpreter with exit status 1.
import sys

tokens = sys.stdin.read().split()
values = [int(tokens[0])]
print(values[0] + values[1])
