// Expected verdict: AC. The values need 64 bits, more than a JavaScript number holds exactly,
// so the sum is computed with BigInt.
// Compiled with `tsc --strict` and no @types/node: the Node.js globals are declared here, and
// BigInt is reached through globalThis so the file type-checks whatever --target/--lib is used.
declare const require: any;
declare const process: any;

const fs = require("fs");
const toBig: (text: string) => any = (globalThis as any).BigInt;

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const total = toBig(tokens[0]) + toBig(tokens[1]);
process.stdout.write(String(total) + "\n");
