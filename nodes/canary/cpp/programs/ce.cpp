// A string assigned to an integer: does not compile.
#include <iostream>

int main() {
    long long a = "a + b";
    std::cout << a << '\n';
}
