// Expected verdict: OLE. The module form of ole.ts: writes the right sum again and again,
// forever, in 1 MiB blocks. fs.writeSync blocks until each block is written.
declare const require: any;

const fs = require("fs");

export function repeated(line: string, bytes: number): string {
    return line.repeat(Math.ceil(bytes / line.length));
}

const big: (text: string) => any = (globalThis as any).BigInt;
const [a, b]: string[] = fs.readFileSync(0, "utf8").trim().split(/\s+/);
const block = repeated(String(big(a) + big(b)) + "\n", 1 << 20);
for (;;) fs.writeSync(1, block);
