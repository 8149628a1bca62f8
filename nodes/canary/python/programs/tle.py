# Reads the input, then spins.
input()
spins = 0
while True:
    spins += 1
