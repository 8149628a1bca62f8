// Expected verdict: CE. The module form of ce.ts: `tsc --strict` rejects returning a string
// where a number is declared (error TS2322), so compilation fails.
declare const require: any;

export function add(left: string, right: string): number {
    return left + right;
}

const [a, b]: string[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/);
print(add(a, b));
