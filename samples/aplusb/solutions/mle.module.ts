// Expected verdict: MLE. The module form of mle.ts: holds 1 GiB (four times the 256 MB limit)
// in 16 MiB typed arrays, writing to every page so that the memory is committed, then would
// print the right sum.
declare const require: any;

export function hoard(blocks: number, blockBytes: number): Uint8Array[] {
    const held: Uint8Array[] = [];
    while (held.length < blocks) {
        const block = new Uint8Array(blockBytes);
        for (let page = 0; page < blockBytes; page += 4096) block[page] = (page + held.length + 1) & 255;
        held.push(block);
    }
    return held;
}

const held = hoard(64, 16 << 20);
const big: (text: string) => any = (globalThis as any).BigInt;
const [a, b]: string[] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/);
print(String(big(a) + big(b)) + (held.length === 64 ? "" : " unreachable"));
