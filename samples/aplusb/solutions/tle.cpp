// Expected verdict: TLE. Reads the input, then spins forever.
// The counter is volatile so the compiler cannot remove the loop.
#include <iostream>

int main() {
    long long a, b;
    if (!(std::cin >> a >> b)) return 1;
    volatile unsigned long long spins = 0;
    for (;;) {
        spins = spins + 1;
    }
}
