// Expected verdict: TLE (on the largest case; the smaller ones pass in time).
// The prefix-sum loop sits inside the query loop, so every query rebuilds the sums:
// O(n * q), about 1.6 * 10^10 dependent additions on the largest case.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const n = Number(tokens[0]);
const q = Number(tokens[1]);
const values: number[] = [0];
for (let i = 1; i <= n; i++) values.push(Number(tokens[1 + i]));
const prefix: number[] = values.map(() => 0);
const answers: string[] = [];
for (let k = 0, pos = 2 + n; k < q; k++, pos += 2) {
    const l = Number(tokens[pos]);
    const r = Number(tokens[pos + 1]);
    for (let i = 1; i <= r; i++) prefix[i] = prefix[i - 1] + values[i];
    answers.push(String(prefix[r] - prefix[l - 1]));
}
process.stdout.write(answers.join("\n") + "\n");
