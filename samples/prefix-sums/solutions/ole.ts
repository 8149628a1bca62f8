// Expected verdict: OLE. Computes the right answers but forgets to stop: writes them again and
// again, forever (in blocks of at least 1 MiB), passing any output limit within a second.
// fs.writeSync on descriptor 1 blocks until each block is written, so nothing piles up in memory.
declare const require: any;

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
    answers.push(String(prefix[r] - prefix[l - 1]) + "\n");
}
const text = answers.join("");
let block = text;
while (block.length < (1 << 20)) block += text;
for (;;) {
    fs.writeSync(1, block);
}
