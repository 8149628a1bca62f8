// Expected verdict: TLE (on the largest case; the smaller ones pass in time).
// The prefix-sum loop sits inside the query loop, so every query rebuilds the sums:
// O(n * q), about 1.6 * 10^10 dependent additions on the largest case. (A running sum
// cannot be vectorised, so this stays several times over the limit at any optimisation level.)
#include <iostream>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, q;
    std::cin >> n >> q;
    std::vector<long long> values(n + 1, 0), prefix(n + 1, 0);
    for (int i = 1; i <= n; ++i) std::cin >> values[i];
    for (int k = 0; k < q; ++k) {
        int l, r;
        std::cin >> l >> r;
        for (int i = 1; i <= r; ++i) prefix[i] = prefix[i - 1] + values[i];
        std::cout << prefix[r] - prefix[l - 1] << '\n';
    }
    return 0;
}
