"""C++17 with g++ -O2."""

from . import RuntimeSpec

SPEC = RuntimeSpec(
    id="cpp-r1",
    pool="cpp",
    source_file="main.cpp",
    compile=("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp"),
    run=("./main",),
    memory_model="native",
    as_slack_mb=16,
    oom_markers=("std::bad_alloc",),
    check=(("g++", "--version"),),
)

# Self-check program: reads two integers, prints their sum.
CHECK_SOURCE = b"""#include <iostream>
int main() { long long a, b; std::cin >> a >> b; std::cout << a + b << "\\n"; return 0; }
"""
