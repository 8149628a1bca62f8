// Expected verdict: AC. O(n + q): prefix sums, each query is one subtraction.
// |sum| <= 2 * 10^5 * 10^9 = 2 * 10^14 < 2^53, so JavaScript numbers are exact here.
// Compiled with `tsc --strict` and no @types/node, hence the two declarations.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const n = Number(tokens[0]);
const q = Number(tokens[1]);
const prefix: number[] = [0];
for (let i = 1; i <= n; i++) prefix.push(prefix[i - 1] + Number(tokens[1 + i]));
const answers: string[] = [];
for (let k = 0, pos = 2 + n; k < q; k++, pos += 2) {
    const l = Number(tokens[pos]);
    const r = Number(tokens[pos + 1]);
    answers.push(String(prefix[r] - prefix[l - 1]));
}
process.stdout.write(answers.join("\n") + "\n");
