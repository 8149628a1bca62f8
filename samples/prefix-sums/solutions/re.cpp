// Expected verdict: RE. Off-by-one loop bound: reads the values into a 0-based vector of size n
// but builds the prefix sums with i <= n, so values.at(n) throws std::out_of_range,
// nothing catches it, and the program aborts (SIGABRT) on every case.
#include <iostream>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, q;
    std::cin >> n >> q;
    std::vector<long long> values(n), prefix(n + 2, 0);
    for (int i = 0; i < n; ++i) std::cin >> values[i];
    for (int i = 0; i <= n; ++i) prefix[i + 1] = prefix[i] + values.at(i);
    for (int k = 0; k < q; ++k) {
        int l, r;
        std::cin >> l >> r;
        std::cout << prefix[r] - prefix[l - 1] << '\n';
    }
    return 0;
}
