// Expected verdict: WA. Uses 32-bit int, so the large cases (|a|, |b| up to 10^18) fail:
// reading 10^18 into an int fails and the program prints nonsense.
#include <iostream>

int main() {
    int a = 0, b = 0;
    std::cin >> a >> b;
    std::cout << a + b << '\n';
    return 0;
}
