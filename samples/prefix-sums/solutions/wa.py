# Expected verdict: WA. Off-by-one: subtracts prefix[l] instead of prefix[l - 1], so every
# answer misses its first element.
import sys
from itertools import accumulate


def main():
    data = sys.stdin.buffer.read().split()
    n, q = int(data[0]), int(data[1])
    prefix = list(accumulate(map(int, data[2:2 + n]), initial=0))
    bounds = map(int, data[2 + n:2 + n + 2 * q])
    answers = [prefix[r] - prefix[l] for l, r in zip(bounds, bounds)]
    sys.stdout.write("\n".join(map(str, answers)) + "\n")


main()
