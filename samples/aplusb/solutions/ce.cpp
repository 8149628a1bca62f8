// Expected verdict: CE. Missing semicolon and an undeclared identifier.
#include <iostream>

int main() {
    long long a, b
    std::cin >> a >> b;
    std::cout << a + c << '\n';
    return 0;
}
