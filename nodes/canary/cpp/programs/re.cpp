// .at(1) on a one-element vector throws std::out_of_range; nothing catches it (SIGABRT).
#include <iostream>
#include <vector>

int main() {
    long long a, b;
    std::cin >> a >> b;
    std::vector<long long> v(1, a);
    std::cout << v.at(0) + v.at(1) + b << '\n';
}
