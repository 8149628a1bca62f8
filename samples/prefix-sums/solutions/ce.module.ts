// Expected verdict: CE. The module form of ce.ts: `tsc --strict` refuses a query passed as a
// string where the exported function takes a tuple of numbers (error TS2345).
declare const require: any;

export function rangeSum(prefix: number[], query: [number, number]): number {
    return prefix[query[1]] - prefix[query[0] - 1];
}

const tokens: string[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/);
print(rangeSum([0], tokens[2]));
