// Expected verdict: RE. The vector is one element too short; .at() throws std::out_of_range,
// nothing catches it, and the program aborts (SIGABRT).
#include <iostream>
#include <vector>

int main() {
    long long a, b;
    if (!(std::cin >> a >> b)) return 1;
    std::vector<long long> values(1);
    values.at(0) = a;
    values.at(1) = b;
    std::cout << values.at(0) + values.at(1) << '\n';
    return 0;
}
