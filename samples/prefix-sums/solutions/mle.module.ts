// Expected verdict: MLE. The module form of mle.ts: correct answers, but first holds 1 GiB
// (four times the 256 MB limit) in 16 MiB Float64Arrays, writing to every page so that the
// memory is committed, not just reserved.
declare const require: any;

export function hoard(copies: number, length: number): Float64Array[] {
    const held: Float64Array[] = [];
    while (held.length < copies) {
        const copy = new Float64Array(length);
        for (let i = 0; i < length; i += 512) copy[i] = held.length + 1;  // one write per 4 KiB page
        held.push(copy);
    }
    return held;
}

const held = hoard(64, 2 << 20);  // 64 * 16 MiB = 1 GiB, committed page by page
const numbers: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/).map(Number);
const [n, q] = numbers;
const prefix: number[] = [0];
for (let i = 1; i <= n; i++) prefix.push(prefix[i - 1] + numbers[1 + i]);
const sums: number[] = [];
for (let k = 0, at = 2 + n; k < q; k++, at += 2) sums.push(prefix[numbers[at + 1]] - prefix[numbers[at] - 1]);
print(sums.join("\n") + (held.length === 64 ? "" : "\nunreachable"));
