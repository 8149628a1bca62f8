# Expected verdict: AC. O(n + q): prefix sums, each query is one subtraction.
# Reads all input at once; per-line input() would be much slower for 10^5 lines.
import sys
from itertools import accumulate


def main():
    data = sys.stdin.buffer.read().split()
    n, q = int(data[0]), int(data[1])
    prefix = list(accumulate(map(int, data[2:2 + n]), initial=0))
    bounds = map(int, data[2 + n:2 + n + 2 * q])
    answers = [prefix[r] - prefix[l - 1] for l, r in zip(bounds, bounds)]
    sys.stdout.write("\n".join(map(str, answers)) + "\n")


main()
