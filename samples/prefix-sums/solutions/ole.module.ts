// Expected verdict: OLE. The module form of ole.ts: computes the right answers, then writes
// them again and again, forever, in blocks of at least 1 MiB.
declare const require: any;

const fs = require("fs");

export function answers(numbers: number[]): string {
    const [n, q] = numbers;
    const prefix: number[] = [0];
    for (let i = 1; i <= n; i++) prefix.push(prefix[i - 1] + numbers[1 + i]);
    const lines: string[] = [];
    for (let k = 0, at = 2 + n; k < q; k++, at += 2) lines.push(`${prefix[numbers[at + 1]] - prefix[numbers[at] - 1]}\n`);
    return lines.join("");
}

const text = answers(fs.readFileSync(0, "utf8").trim().split(/\s+/).map(Number));
const block = text.repeat(Math.ceil((1 << 20) / text.length));
for (;;) fs.writeSync(1, block);
