// Expected verdict: CE. `prefix` is used before it is declared and a type is missing.
#include <iostream>
#include <vector>

int main() {
    int n, q;
    std::cin >> n >> q;
    for (int i = 1; i <= n; ++i) {
        long long value;
        std::cin >> value;
        prefix[i] = prefix[i - 1] + value;
    }
    std::vector<> prefix(n + 1);
    return 0;
}
