// Expected verdict: AC. The module form of ac.ts: a file that exports something is a module,
// and it reaches Node.js through `require` as a CommonJS module does. BigInt is reached
// through globalThis so the file type-checks whatever --target/--lib is used.
declare const require: any;

type Big = any;
const big: (text: string) => Big = (globalThis as any).BigInt;

export function add(left: string, right: string): string {
    return String(big(left) + big(right));
}

const [a, b]: string[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/);
print(add(a, b));
