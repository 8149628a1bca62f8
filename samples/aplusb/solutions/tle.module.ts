// Expected verdict: TLE. The module form of tle.ts: reads the input, then spins forever.
declare const require: any;

export function spin(seed: number): number {
    let state = seed;
    for (;;) {
        state = (state * 31 + 7) % 1000003;
    }
}

print(spin(require("fs").readFileSync(0, "utf8").length));
