// Expected verdict: RE. The module form of re.ts: the queries are parsed into objects, but
// the loop runs one past the last, and reading .l of undefined throws an uncaught TypeError.
declare const require: any;

export interface Query { l: number; r: number; }

const numbers: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/).map(Number);
const [n, q] = numbers;
const queries: Query[] = [];
for (let k = 0, at = 2 + n; k < q; k++, at += 2) queries.push({ l: numbers[at], r: numbers[at + 1] });
const prefix: number[] = [0];
for (let i = 1; i <= n; i++) prefix.push(prefix[i - 1] + numbers[1 + i]);
const sums: number[] = [];
for (let k = 0; k <= q; k++) sums.push(prefix[queries[k].r] - prefix[queries[k].l - 1]);
print(sums.join("\n"));
