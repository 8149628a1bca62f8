// Reads the input, then spins; volatile keeps the compiler from removing the loop.
#include <iostream>

int main() {
    long long a, b;
    std::cin >> a >> b;
    volatile unsigned long long spins = 0;
    for (;;) spins = spins + 1;
}
