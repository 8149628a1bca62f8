// Expected verdict: MLE. Allocates 1 GiB (four times the 256 MB limit) in 16 MiB chunks and
// writes to every page, so the memory is really committed, not just reserved.
// Allocating in chunks lets the process grow step by step up to whatever limit applies.
#include <cstddef>
#include <iostream>
#include <vector>

int main() {
    long long a, b;
    if (!(std::cin >> a >> b)) return 1;
    const std::size_t chunkBytes = std::size_t(16) << 20;
    const int chunks = 64;  // 64 * 16 MiB = 1 GiB
    std::vector<char*> held;
    volatile long long checksum = 0;
    for (int c = 0; c < chunks; ++c) {
        char* chunk = new char[chunkBytes];
        for (std::size_t i = 0; i < chunkBytes; i += 4096) chunk[i] = char(i + c);
        held.push_back(chunk);
        checksum = checksum + chunk[chunkBytes / 2];
    }
    std::cout << a + b << '\n';
    return 0;
}
