"""ArkTS — default spec ``arkts-r1`` is a STAND-IN.

No ArkTS toolchain (ArkCompiler ``es2abc`` and the ``ark_js_vm``) is available from the
package registries this project installs from. The default spec therefore type-checks the
submission with the TypeScript compiler in strict mode (``tsc --strict``, ArkTS being a
stricter TypeScript) and runs the emitted JavaScript on Node.js. A small prelude gives
programs the same two I/O functions on either toolchain:

* ``readLine(): string | undefined`` — the next line of standard input, ``undefined`` at end;
* ``print(...values)`` — the values separated by spaces, then a newline (``console.log``
  does the same).

A submission may be a script or a module (``export`` or ``import`` at top level). tsc
emits CommonJS (``--module commonjs``), the format Node.js loads ``main.js`` in. Left to its
default (ES modules for ``--target es2020``) tsc kept a module's ``export`` and ``import``
statements, and the program died at load, or, where Node.js detects the syntax and loads it
as an ES module, lost ``require``: a correct program judged RE. A script compiles to the
same JavaScript either way, so the flag changes no verdict of a program that ran before, and
``arkts-r1`` keeps its id. Top-level ``await`` stays a compile error (TS1378), as it was.

To judge with the real ArkCompiler, override the spec in ``JUDGE_RUNTIME_SPEC_FILE``
(see ``node_agent/README.md``); the judging logic does not change.
"""

from . import RuntimeSpec

PRELUDE_DTS = """// I/O available to ArkTS submissions (stand-in runtime).
declare function readLine(): string | undefined;
declare function print(...values: unknown[]): void;
declare const console: {
  log(...values: unknown[]): void;
  error(...values: unknown[]): void;
};
"""

PRELUDE_JS = """'use strict';
// Stand-in runtime for ArkTS submissions: line input and buffered output on Node.js.
const fs = require('fs');
const util = require('util');
let input = null;
let pos = 0;
globalThis.readLine = function readLine() {
  if (input === null) {
    try { input = fs.readFileSync(0, 'utf8'); } catch (e) { input = ''; }
  }
  if (pos >= input.length) return undefined;
  let end = input.indexOf('\\n', pos);
  if (end < 0) end = input.length;
  let line = input.slice(pos, end);
  pos = end + 1;
  if (line.endsWith('\\r')) line = line.slice(0, -1);
  return line;
};
const pending = [];
let pendingBytes = 0;
function flush() {
  if (pending.length) {
    const text = pending.join('');
    pending.length = 0;
    pendingBytes = 0;
    fs.writeSync(1, text);
  }
}
globalThis.print = function print(...values) {
  const text = util.format(...values) + '\\n';
  pending.push(text);
  pendingBytes += text.length;
  if (pendingBytes >= 65536) flush();
};
console.log = globalThis.print;
console.error = (...values) => { flush(); fs.writeSync(2, util.format(...values) + '\\n'); };
process.on('exit', flush);
"""

SPEC = RuntimeSpec(
    id="arkts-r1",
    pool="arkts",
    source_file="main.ts",
    compile=(
        "tsc", "--strict", "--noEmitOnError", "--pretty", "false", "--target", "es2020",
        "--lib", "es2020", "--module", "commonjs", "--outDir", ".", "prelude.d.ts", "main.ts",
    ),
    run=("node", "--max-old-space-size={memory_mb}", "--stack-size=16000", "-r", "./prelude.js", "main.js"),
    memory_model="vm",
    vm_overhead_mb=64,
    processes=32,
    compile_processes=64,
    files=(("prelude.d.ts", PRELUDE_DTS), ("prelude.js", PRELUDE_JS)),
    oom_markers=("JavaScript heap out of memory", "Array buffer allocation failed"),
    check=(("tsc", "--version"), ("node", "--version")),
    stand_in="TypeScript compiler (tsc --strict) and Node.js in place of ArkCompiler",
)

CHECK_SOURCE = b"""const parts: string[] = (readLine() ?? "").trim().split(/\\s+/);
const sum: number = parts
  .map((p: string): number => parseInt(p, 10))
  .reduce((a: number, b: number): number => a + b, 0);
print(sum);
"""
