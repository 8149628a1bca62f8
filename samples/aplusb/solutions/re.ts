// Expected verdict: RE. The array has one element; values[1] is undefined, and calling a
// method on it throws an uncaught TypeError, so node exits with a non-zero status.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const values: string[] = [tokens[0]];
process.stdout.write(values[0].trim() + values[1].trim() + "\n");
