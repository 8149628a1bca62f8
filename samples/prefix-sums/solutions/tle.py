# Expected verdict: TLE (on the larger cases; the small ones pass in time).
# The prefix-sum loop sits inside the query loop, so every query rebuilds the sums:
# O(n * q), about 1.6 * 10^10 interpreted additions on the largest case.
import sys


def main():
    data = sys.stdin.buffer.read().split()
    n, q = int(data[0]), int(data[1])
    values = [0] + [int(token) for token in data[2:2 + n]]
    prefix = [0] * (n + 1)
    out = []
    pos = 2 + n
    for _ in range(q):
        l, r = int(data[pos]), int(data[pos + 1])
        pos += 2
        for i in range(1, r + 1):
            prefix[i] = prefix[i - 1] + values[i]
        out.append(prefix[r] - prefix[l - 1])
    sys.stdout.write("\n".join(map(str, out)) + "\n")


main()
