// Expected verdict: OLE. Computes the right answers but forgets to stop: writes them again and
// again, forever (in blocks of at least 1 MiB), passing any output limit within a second.
#include <cstdio>
#include <iostream>
#include <string>
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
    std::string answers;
    for (int k = 0; k < q; ++k) {
        int l, r;
        std::cin >> l >> r;
        answers += std::to_string(prefix[r] - prefix[l - 1]) + "\n";
    }
    std::string block;
    while (block.size() < (std::size_t(1) << 20)) block += answers;
    for (;;) {
        if (std::fwrite(block.data(), 1, block.size(), stdout) != block.size()) return 1;
    }
}
