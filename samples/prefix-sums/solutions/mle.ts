// Expected verdict: MLE. Correct answers, but first allocates 1 GiB (four times the 256 MB
// limit) in 16 MiB typed arrays and writes to every page, keeping every array alive.
// (Typed arrays start out as untouched zero pages; the writes are what commit the memory.)
declare const require: any;
declare const process: any;

const fs = require("fs");

const chunkBytes = 16 << 20;
const held: Uint8Array[] = [];
for (let c = 0; c < 64; c++) {  // 64 * 16 MiB = 1 GiB
    const chunk = new Uint8Array(chunkBytes);
    for (let i = 0; i < chunkBytes; i += 4096) chunk[i] = (i + c + 1) & 255;
    held.push(chunk);
}

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
process.stdout.write(answers.join("\n") + "\n" + (held.length === 64 ? "" : "unreachable\n"));
