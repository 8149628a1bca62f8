# Subtracts instead of adding: wrong on every case.
a, b = map(int, input().split())
print(a - b)
