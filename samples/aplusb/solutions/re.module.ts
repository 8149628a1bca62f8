// Expected verdict: RE. The module form of re.ts: the parser is handed one operand and reads
// a second that is not there; calling a method on undefined throws an uncaught TypeError.
declare const require: any;

export function operands(text: string): string[] {
    return [text.trim().split(/\s+/)[0]];
}

const values = operands(require("fs").readFileSync(0, "utf8"));
print(values[0].trim() + values[1].trim());
