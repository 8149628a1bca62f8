// Expected verdict: MLE. Allocates 1 GiB (four times the 256 MB limit) in 16 MiB typed arrays
// and writes to every page, keeping every array alive. (Typed arrays start out as untouched
// zero pages, so the writes are what really commits the memory.)
declare const require: any;
declare const process: any;

const fs = require("fs");
const toBig: (text: string) => any = (globalThis as any).BigInt;

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const chunkBytes = 16 << 20;
const held: Uint8Array[] = [];
for (let c = 0; c < 64; c++) {  // 64 * 16 MiB = 1 GiB
    const chunk = new Uint8Array(chunkBytes);
    for (let i = 0; i < chunkBytes; i += 4096) chunk[i] = (i + c + 1) & 255;
    held.push(chunk);
}
const total = toBig(tokens[0]) + toBig(tokens[1]);
process.stdout.write(String(total) + "\n" + (held.length === 64 ? "" : "unreachable\n"));
