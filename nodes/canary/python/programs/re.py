# Index 1 of a one-element list: IndexError, exit status 1.
values = [int(v) for v in input().split()[:1]]
print(values[0] + values[1])
