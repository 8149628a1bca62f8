# Expected verdict: MLE. Correct answers, but first allocates 1 GiB (four times the 256 MB
# limit) in 16 MiB chunks and writes to every page, keeping every chunk alive.
import sys
from itertools import accumulate

CHUNK = 16 << 20
held = []
for c in range(64):  # 64 * 16 MiB = 1 GiB
    chunk = bytearray(CHUNK)
    chunk[::4096] = bytes([c + 1]) * (CHUNK // 4096)
    held.append(chunk)

data = sys.stdin.buffer.read().split()
n, q = int(data[0]), int(data[1])
prefix = list(accumulate(map(int, data[2:2 + n]), initial=0))
bounds = map(int, data[2 + n:2 + n + 2 * q])
answers = [prefix[r] - prefix[l - 1] for l, r in zip(bounds, bounds)]
sys.stdout.write("\n".join(map(str, answers)) + "\n")
