# Expected verdict: CE. Syntax error (missing colon after the def line):
# python3 -m py_compile rejects the file.
import sys


def main()
    data = sys.stdin.buffer.read().split()
    n, q = int(data[0]), int(data[1])
    print(n, q)


main()
