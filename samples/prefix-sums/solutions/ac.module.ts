// Expected verdict: AC. The module form of ac.ts: O(n + q), prefix sums, each query one
// subtraction. A file that exports something is a module; it reaches Node.js through
// `require`, as a CommonJS module does.
declare const require: any;

export interface Problem {
    values: number[];
    queries: Array<[number, number]>;
}

export function parse(text: string): Problem {
    const numbers = text.split(/\s+/).filter((t: string) => t.length > 0).map(Number);
    const [n, q] = numbers;
    const queries: Array<[number, number]> = [];
    for (let k = 0; k < q; k++) queries.push([numbers[2 + n + 2 * k], numbers[3 + n + 2 * k]]);
    return { values: numbers.slice(2, 2 + n), queries };
}

export function rangeSums(problem: Problem): number[] {
    const prefix = new Float64Array(problem.values.length + 1);
    problem.values.forEach((value: number, i: number) => { prefix[i + 1] = prefix[i] + value; });
    return problem.queries.map(([l, r]: [number, number]) => prefix[r] - prefix[l - 1]);
}

require("fs").writeSync(1, rangeSums(parse(require("fs").readFileSync(0, "utf8"))).join("\n") + "\n");
