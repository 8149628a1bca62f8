// Expected verdict: WA. Uses plain JavaScript numbers (doubles): integers beyond 2^53 lose
// precision, so the case with -999999999999999999 + 123456789012345678 comes out wrong.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const total: number = Number(tokens[0]) + Number(tokens[1]);
process.stdout.write(total.toFixed(0) + "\n");
