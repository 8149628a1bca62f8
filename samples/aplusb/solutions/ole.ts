// Expected verdict: OLE. Forgets to stop: prints the answer again and again, forever,
// in 1 MiB blocks, so it passes any output limit within a fraction of a second.
// fs.writeSync on descriptor 1 blocks until each block is written, so nothing piles up in memory.
declare const require: any;

const fs = require("fs");
const toBig: (text: string) => any = (globalThis as any).BigInt;

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const line = String(toBig(tokens[0]) + toBig(tokens[1])) + "\n";
let block = line;
while (block.length < (1 << 20)) block += block;
for (;;) {
    fs.writeSync(1, block);
}
