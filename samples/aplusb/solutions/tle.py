# Expected verdict: TLE. Reads the input, then spins forever.
import sys

a, b = map(int, sys.stdin.read().split())
spins = 0
while True:
    spins += 1
