// Expected verdict: WA. Right algorithm, but the prefix sums are 32-bit ints: sums beyond
// 2^31 - 1 overflow (already in the example, where 10^9 + 10^9 + ... does not fit).
#include <iostream>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, q;
    std::cin >> n >> q;
    std::vector<int> prefix(n + 1, 0);
    for (int i = 1; i <= n; ++i) {
        int value;
        std::cin >> value;
        prefix[i] = int((unsigned) prefix[i - 1] + (unsigned) value);  // wraps around like a careless int sum
    }
    for (int k = 0; k < q; ++k) {
        int l, r;
        std::cin >> l >> r;
        std::cout << int((unsigned) prefix[r] - (unsigned) prefix[l - 1]) << '\n';
    }
    return 0;
}
