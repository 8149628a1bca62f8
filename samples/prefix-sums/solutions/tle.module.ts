// Expected verdict: TLE (on the largest case; the smaller ones pass in time). The module form
// of tle.ts: each query adds up its range from scratch, O(n * q).
declare const require: any;

export function rangeSum(values: number[], l: number, r: number): number {
    let sum = 0;
    for (let i = l; i <= r; i++) sum += values[i];
    return sum;
}

const numbers: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/).map(Number);
const [n, q] = numbers;
const values = numbers.slice(1, 2 + n);  // values[i] is a_i, 1-based
const sums: number[] = [];
for (let k = 0, at = 2 + n; k < q; k++, at += 2) sums.push(rangeSum(values, numbers[at], numbers[at + 1]));
print(sums.join("\n"));
