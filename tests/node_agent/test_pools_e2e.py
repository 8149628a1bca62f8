"""Every verdict, for every program pool, end to end: fake control plane → real agent → sandbox.

The problem: read two integers, print their sum (two cases, 50 points each).
"""

from __future__ import annotations

import json

import pytest

from .conftest import SUM_CASES, need_pool, verdict_of

LIMITS = {"timeLimitMs": 1000, "memoryLimitMb": 128, "outputLimitKb": 64}

PROGRAMS = {
    "cpp": {
        "AC": '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n',
        "WA": '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a-b<<"\\n";}\n',
        "TLE": "int main(){volatile unsigned long x=0; while(true) x++;}\n",
        "MLE": "#include <vector>\n#include <cstring>\nint main(){std::vector<char*> v;"
               " while(true){char*p=new char[1<<20]; std::memset(p,1,1<<20); v.push_back(p);}}\n",
        "RE": "int main(){ volatile int* p = nullptr; *p = 1; return 0; }\n",
        "CE": "int main( { return 0 }\n",
        "OLE": '#include <cstdio>\nint main(){ while(true) std::puts("flood flood flood flood"); }\n',
    },
    "java": {
        "AC": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
              " Scanner s = new Scanner(System.in); long x = s.nextLong(), y = s.nextLong();"
              " System.out.println(x + y); } }\n",
        "WA": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
              " Scanner s = new Scanner(System.in); long x = s.nextLong(), y = s.nextLong();"
              " System.out.println(x * y + 2); } }\n",
        "TLE": "public class Main { public static void main(String[] a) { long x = 0;"
               " while (true) { x++; if (x == -1) System.out.println(x); } } }\n",
        "MLE": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
               " List<long[]> keep = new ArrayList<>(); while (true) keep.add(new long[1 << 20]); } }\n",
        "RE": "public class Main { public static void main(String[] a) { throw new IllegalStateException(\"boom\"); } }\n",
        "CE": "public class Main { public static void main(String[] a) { int x = \"text\"; } }\n",
        "OLE": "public class Main { public static void main(String[] a) {"
               " while (true) System.out.println(\"flood flood flood flood\"); } }\n",
    },
    "python": {
        "AC": "a, b = map(int, input().split())\nprint(a + b)\n",
        "WA": "a, b = map(int, input().split())\nprint(a - b)\n",
        "TLE": "x = 0\nwhile True:\n    x += 1\n",
        "MLE": "keep = []\nwhile True:\n    keep.append(bytearray(1 << 20))\n",
        "RE": "a, b = map(int, input().split())\nprint(a // 0)\n",
        "CE": "def broken(:\n    pass\n",
        "OLE": "while True:\n    print('flood flood flood flood')\n",
    },
    "arkts": {
        "AC": "const parts: string[] = (readLine() ?? '').trim().split(' ');\n"
              "print(parseInt(parts[0], 10) + parseInt(parts[1], 10));\n",
        "WA": "const parts: string[] = (readLine() ?? '').trim().split(' ');\n"
              "print(parseInt(parts[0], 10) * 2);\n",
        "TLE": "let x: number = 0;\nwhile (true) { x++; }\n",
        "MLE": "const keep: number[][] = [];\nwhile (true) { keep.push(new Array<number>(1 << 20).fill(1)); }\n",
        "RE": "function fail(): number { throw new Error('boom'); }\nprint(fail());\n",
        "CE": "const x: number = 'not a number';\nprint(x);\n",
        "OLE": "while (true) { print('flood flood flood flood'); }\n",
    },
}

# The same ArkTS programs as modules: an export makes the file one, and require is what a
# CommonJS module has. Top-level await is the compile error here: tsc refuses it outside ES
# modules, which is what the runtime emits.
MODULE_HEADER = 'declare const require: any;\nexport const input: string = require("fs").readFileSync(0, "utf8");\n'
ARKTS_MODULES = {
    "AC": MODULE_HEADER + "const parts: string[] = input.trim().split(' ');\n"
                          "print(parseInt(parts[0], 10) + parseInt(parts[1], 10));\n",
    "WA": MODULE_HEADER + "print(parseInt(input, 10) * 2);\n",
    "CE": MODULE_HEADER + "const n: number = await Promise.resolve(input.length);\nprint(n);\n",
    **{verdict: MODULE_HEADER + PROGRAMS["arkts"][verdict] for verdict in ("TLE", "MLE", "RE", "OLE")},
}


@pytest.mark.parametrize("pool, programs", [*((pool, PROGRAMS[pool]) for pool in PROGRAMS),
                                            ("arkts", ARKTS_MODULES)],
                         ids=[*PROGRAMS, "arkts-module"])
def test_each_program_gets_its_verdict(pool, programs, plane, launch):
    need_pool(pool)
    agent, _node = launch(plane, pool, slots=2)
    jobs = {verdict: plane.add_job(pool=pool, source=src, cases=SUM_CASES, limits=LIMITS)
            for verdict, src in programs.items()}

    got = {verdict: verdict_of(plane, job_id) for verdict, job_id in jobs.items()}

    assert {want: body["verdict"] for want, body in got.items()} == {want: want for want in got}, \
        {want: body.get("compileOutput", "")[:300] for want, body in got.items() if body["verdict"] != want}
    ac = got["AC"]
    assert ac["outcome"] == "JUDGED" and ac["score"] == 100
    assert [c["verdict"] for c in ac["cases"]] == ["AC", "AC"]
    assert all(c["memoryKb"] > 0 and c["timeMs"] >= 0 and c["score"] == 50 for c in ac["cases"])
    assert got["WA"]["score"] == 0 and [c["score"] for c in got["WA"]["cases"]] == [0, 0]
    assert got["CE"]["compileOutput"].strip(), "a compile error carries the compiler's message"
    # The compiler's message, not a crash of the judge's own compile step.
    assert "Traceback (most recent call last)" not in got["CE"]["compileOutput"], got["CE"]["compileOutput"]
    if pool == "python":
        assert got["CE"]["compileOutput"].splitlines()[-1].startswith("SyntaxError:")
    assert got["CE"]["cases"] == []
    assert got["TLE"]["cases"][0]["timeMs"] >= LIMITS["timeLimitMs"]
    # Each settled exactly once, by the first lease; the agent survived all of it.
    assert all(len(plane.jobs[j].results) == 1 and plane.jobs[j].lease_epoch == 1 for j in jobs.values())
    assert agent.alive()
    # Every line is one JSON object, and every line about a job names the job and the lease.
    lines = [json.loads(line) for line in agent.logs().splitlines()]
    job_lines = [line for line in lines if "job" in line]
    assert job_lines and all(isinstance(line["leaseEpoch"], int) for line in job_lines)
    assert {line["job"] for line in job_lines} >= set(jobs.values())
