# Expected verdict: OLE. Forgets to stop: prints the answer again and again, forever,
# in 1 MiB blocks, so it passes any output limit within a fraction of a second.
import sys

a, b = map(int, sys.stdin.read().split())
line = b"%d\n" % (a + b)
block = line * ((1 << 20) // len(line))
out = sys.stdout.buffer
while True:
    out.write(block)
