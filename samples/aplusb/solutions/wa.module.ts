// Expected verdict: WA. The module form of wa.ts: JavaScript numbers (doubles) hold integers
// exactly only up to 2^53, so the case with -999999999999999999 + 123456789012345678 is off.
declare const require: any;

export function add(left: string, right: string): string {
    return (Number(left) + Number(right)).toFixed(0);
}

const [a, b]: string[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/);
print(add(a, b));
