// values[1] is undefined: calling a method on it throws an uncaught TypeError.
declare const require: any;
declare const process: any;

const fs = require("fs");
const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
const values: string[] = [tokens[0]];
process.stdout.write(values[0].trim() + values[1].trim() + "\n");
