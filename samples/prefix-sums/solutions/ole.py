# Expected verdict: OLE. Computes the right answers but forgets to stop: writes them again and
# again, forever (in blocks of at least 1 MiB), passing any output limit within a second.
import sys
from itertools import accumulate

data = sys.stdin.buffer.read().split()
n, q = int(data[0]), int(data[1])
prefix = list(accumulate(map(int, data[2:2 + n]), initial=0))
bounds = map(int, data[2 + n:2 + n + 2 * q])
answers = "".join("%d\n" % (prefix[r] - prefix[l - 1]) for l, r in zip(bounds, bounds)).encode()
block = answers * (-(-(1 << 20) // len(answers)))
out = sys.stdout.buffer
while True:
    out.write(block)
