declare const require: any;
declare const process: any;

const fs = require("fs");
const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
process.stdout.write(String(Number(tokens[0]) + Number(tokens[1])) + "\n");
