# Expected verdict: MLE. Allocates 1 GiB (four times the 256 MB limit) in 16 MiB chunks and
# writes to every page, keeping every chunk alive.
import sys

a, b = map(int, sys.stdin.read().split())
CHUNK = 16 << 20
PAGES = CHUNK // 4096
held = []
for c in range(64):  # 64 * 16 MiB = 1 GiB
    chunk = bytearray(CHUNK)
    chunk[::4096] = bytes([c + 1]) * PAGES
    held.append(chunk)
print(a + b)
