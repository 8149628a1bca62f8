// Expected verdict: OLE. Forgets to stop: prints the answer again and again, forever,
// in 1 MiB blocks, so it passes any output limit within a fraction of a second.
#include <cstdio>
#include <string>

int main() {
    long long a, b;
    if (std::scanf("%lld %lld", &a, &b) != 2) return 1;
    const std::string line = std::to_string(a + b) + "\n";
    std::string block;
    while (block.size() < (std::size_t(1) << 20)) block += line;
    for (;;) {
        if (std::fwrite(block.data(), 1, block.size(), stdout) != block.size()) return 1;
    }
}
