# Unclosed parenthesis: a syntax error.
a, b = map(int, input().split()
print(a + b)
