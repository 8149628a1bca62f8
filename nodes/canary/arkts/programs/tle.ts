// Reads the input, then spins.
declare const require: any;
declare const process: any;

const fs = require("fs");
const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/).filter((t: string) => t.length > 0);
let spins = tokens.length;
for (;;) {
    spins = (spins + 1) % 1000003;
}
