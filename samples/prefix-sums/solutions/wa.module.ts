// Expected verdict: WA. The module form of wa.ts: the prefix sums live in an Int32Array,
// which wraps every sum beyond 2^31 - 1 around.
declare const require: any;

export function rangeSums(numbers: number[]): number[] {
    const [n, q] = numbers;
    const prefix = new Int32Array(n + 1);
    for (let i = 1; i <= n; i++) prefix[i] = prefix[i - 1] + numbers[1 + i];
    const sums: number[] = [];
    for (let k = 0, at = 2 + n; k < q; k++, at += 2) sums.push(prefix[numbers[at + 1]] - prefix[numbers[at] - 1]);
    return sums;
}

const numbers: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/).map(Number);
print(rangeSums(numbers).join("\n"));
