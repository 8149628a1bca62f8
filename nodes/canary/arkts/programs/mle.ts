// Keeps 512 MiB (four times the 128 MB limit) of 16 MiB typed arrays, writing every page
// (untouched typed arrays are zero pages: the writes commit the memory).
declare const require: any;
declare const process: any;

const fs = require("fs");
const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const held: Uint8Array[] = [];
for (let c = 0; c < 32; c++) {
    const block = new Uint8Array(16 << 20);
    for (let i = 0; i < block.length; i += 4096) block[i] = (i + c + 1) & 255;
    held.push(block);
}
process.stdout.write(String(Number(tokens[0]) + Number(tokens[1]) + held.length - 32) + "\n");
