// Expected verdict: CE. `tsc --strict` rejects assigning a string to a number
// (error TS2322: n is read as a string token and never converted).
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const n: number = tokens[0];
const prefix: number[] = [0];
for (let i = 1; i <= n; i++) prefix.push(prefix[i - 1] + Number(tokens[1 + i]));
process.stdout.write(String(prefix[n]) + "\n");
