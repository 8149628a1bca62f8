# Keeps 512 MiB (four times the 128 MB limit) of 16 MiB blocks, touching every page.
a, b = map(int, input().split())
BLOCK = 16 << 20
held = []
for c in range(32):
    block = bytearray(BLOCK)
    block[::4096] = bytes([c + 1]) * (BLOCK // 4096)
    held.append(block)
print(a + b)
