// Expected verdict: RE. Off-by-one loop bound: `words` holds the n values but the prefix loop
// runs to i <= n, so words[n] is undefined and calling .trim() on it throws an uncaught
// TypeError: node exits with a non-zero status on every case.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const n = Number(tokens[0]);
const q = Number(tokens[1]);
const words: string[] = tokens.slice(2, 2 + n);
const prefix: number[] = [0];
for (let i = 0; i <= n; i++) prefix.push(prefix[i] + parseInt(words[i].trim(), 10));
const answers: string[] = [];
for (let k = 0, pos = 2 + n; k < q; k++, pos += 2) {
    const l = Number(tokens[pos]);
    const r = Number(tokens[pos + 1]);
    answers.push(String(prefix[r] - prefix[l - 1]));
}
process.stdout.write(answers.join("\n") + "\n");
