// Expected verdict: MLE. Correct answers, but first allocates 1 GiB (four times the 256 MB
// limit) in 16 MiB chunks and writes to every page, so the memory is really committed.
#include <cstddef>
#include <iostream>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    const std::size_t chunkBytes = std::size_t(16) << 20;
    std::vector<char*> held;
    volatile long long checksum = 0;
    for (int c = 0; c < 64; ++c) {  // 64 * 16 MiB = 1 GiB
        char* chunk = new char[chunkBytes];
        for (std::size_t i = 0; i < chunkBytes; i += 4096) chunk[i] = char(i + c);
        held.push_back(chunk);
        checksum = checksum + chunk[chunkBytes / 2];
    }
    int n, q;
    std::cin >> n >> q;
    std::vector<long long> prefix(n + 1, 0);
    for (int i = 1; i <= n; ++i) {
        long long value;
        std::cin >> value;
        prefix[i] = prefix[i - 1] + value;
    }
    for (int k = 0; k < q; ++k) {
        int l, r;
        std::cin >> l >> r;
        std::cout << prefix[r] - prefix[l - 1] << '\n';
    }
    return 0;
}
