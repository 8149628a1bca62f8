// Expected verdict: TLE. Reads the input, then spins forever.
declare const require: any;

const fs = require("fs");

const tokens: string[] = fs.readFileSync(0, "utf8").split(/\s+/);
let spins = tokens.length;
for (;;) {
    spins = (spins + 1) % 1000003;
}
