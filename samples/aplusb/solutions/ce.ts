// Expected verdict: CE. `tsc --strict` rejects assigning a string to a number
// (error TS2322), so compilation fails.
declare const require: any;
declare const process: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const total: number = tokens[0] + tokens[1];
process.stdout.write(total + "\n");
