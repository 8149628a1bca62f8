# Expected verdict: RE. Off-by-one loop bound: values has n elements but the prefix loop runs
# over range(n + 1), so values[n] raises IndexError and the interpreter exits with status 1.
import sys


def main():
    data = sys.stdin.buffer.read().split()
    n, q = int(data[0]), int(data[1])
    values = [int(token) for token in data[2:2 + n]]
    prefix = [0]
    for i in range(n + 1):
        prefix.append(prefix[-1] + values[i])
    bounds = map(int, data[2 + n:2 + n + 2 * q])
    answers = [prefix[r] - prefix[l - 1] for l, r in zip(bounds, bounds)]
    sys.stdout.write("\n".join(map(str, answers)) + "\n")


main()
