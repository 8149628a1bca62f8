// Expected verdict: AC. O(n + q): 64-bit prefix sums, each query is one subtraction.
#include <iostream>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, q;
    std::cin >> n >> q;
    std::vector<long long> prefix(n + 1, 0);
    for (int i = 1; i <= n; ++i) {
        long long value;
        std::cin >> value;
        prefix[i] = prefix[i - 1] + value;
    }
    std::string out;
    for (int k = 0; k < q; ++k) {
        int l, r;
        std::cin >> l >> r;
        out += std::to_string(prefix[r] - prefix[l - 1]);
        out += '\n';
    }
    std::cout << out;
    return 0;
}
