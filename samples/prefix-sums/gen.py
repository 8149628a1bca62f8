"""Regenerates the test cases of the prefix-sums sample: python3 gen.py (from this folder).

Deterministic: it uses its own splitmix64 generator with fixed seeds, not Python's `random`,
so every run on every Python 3 version writes byte-identical files into cases/.
The expected outputs are computed here with prefix sums, independently of solutions/.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def between(self, low, high):
        """Integer in [low, high] (the tiny modulo bias is irrelevant here)."""
        return low + self.next() % (high - low + 1)


def random_case(seed, n, q, value_bound):
    rng = SplitMix64(seed)
    values = [rng.between(-value_bound, value_bound) for _ in range(n)]
    queries = []
    for _ in range(q):
        left, right = rng.between(1, n), rng.between(1, n)
        queries.append((min(left, right), max(left, right)))
    return values, queries


def wide_case(seed, n, q, value_bound, slack):
    """Every query covers almost the whole array, so summing each range is n*q work."""
    rng = SplitMix64(seed)
    values = [rng.between(-value_bound, value_bound) for _ in range(n)]
    queries = [(rng.between(1, slack), rng.between(n - slack + 1, n)) for _ in range(q)]
    return values, queries


def write_case(number, values, queries):
    prefix = [0]
    for value in values:
        prefix.append(prefix[-1] + value)
    lines = [f"{len(values)} {len(queries)}", " ".join(map(str, values))]
    lines += [f"{left} {right}" for left, right in queries]
    answers = [str(prefix[right] - prefix[left - 1]) for left, right in queries]
    with open(os.path.join(HERE, "cases", f"{number}.in"), "w", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(HERE, "cases", f"{number}.out"), "w", newline="\n") as f:
        f.write("\n".join(answers) + "\n")


def main():
    os.makedirs(os.path.join(HERE, "cases"), exist_ok=True)
    # 1: the example from the statement; its sums already overflow 32-bit integers.
    write_case(1, [1000000000, 1000000000, -7, 1000000000, 5], [(1, 3), (2, 4), (1, 5)])
    # 2: edge cases: extreme values, l == r, the full range, a negative sum below -2^31.
    write_case(2, [-1000000000, -1000000000, -1000000000], [(1, 1), (3, 3), (2, 3), (1, 3)])
    # 3 and 4: random ranges over values up to 10^9 in absolute value.
    write_case(3, *random_case(3, 1000, 1000, 10**9))
    write_case(4, *random_case(4, 10000, 10000, 10**9))
    # 5: the largest array with near-full ranges: O(n) work per query is far too slow here.
    write_case(5, *wide_case(5, 200000, 80000, 9, 100))


if __name__ == "__main__":
    main()
