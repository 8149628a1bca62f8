// A string assigned to a number: tsc --strict refuses it (TS2322).
declare const require: any;
declare const process: any;

const fs = require("fs");
const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const total: number = tokens[0] + tokens[1];
process.stdout.write(total + "\n");
