// Expected verdict: WA. Right algorithm, but `| 0` truncates every prefix sum to a 32-bit
// integer (a common JavaScript "make it an int" habit), so sums beyond 2^31 - 1 wrap around.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const n = Number(tokens[0]);
const q = Number(tokens[1]);
const prefix: number[] = [0];
for (let i = 1; i <= n; i++) prefix.push((prefix[i - 1] + Number(tokens[1 + i])) | 0);
const answers: string[] = [];
for (let k = 0, pos = 2 + n; k < q; k++, pos += 2) {
    const l = Number(tokens[pos]);
    const r = Number(tokens[pos + 1]);
    answers.push(String((prefix[r] - prefix[l - 1]) | 0));
}
process.stdout.write(answers.join("\n") + "\n");
