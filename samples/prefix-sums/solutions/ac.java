// Expected verdict: AC. O(n + q): 64-bit prefix sums, each query is one subtraction.
// Reads stdin through a small byte-level tokenizer (Scanner is too slow for 10^5 numbers).
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;

public class Main {
    private static final class Reader {
        private final InputStream in;
        private final byte[] buffer = new byte[1 << 16];
        private int length = 0, position = 0;

        Reader(InputStream in) { this.in = in; }

        private int read() throws IOException {
            if (position == length) {
                length = in.read(buffer, 0, buffer.length);
                position = 0;
                if (length <= 0) return -1;
            }
            return buffer[position++];
        }

        long nextLong() throws IOException {
            int c = read();
            while (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = read();
            boolean negative = c == '-';
            if (negative) c = read();
            long value = 0;
            while (c >= '0' && c <= '9') {
                value = value * 10 + (c - '0');
                c = read();
            }
            return negative ? -value : value;
        }
    }

    public static void main(String[] args) throws IOException {
        Reader in = new Reader(new DataInputStream(System.in));
        int n = (int) in.nextLong();
        int q = (int) in.nextLong();
        long[] prefix = new long[n + 1];
        for (int i = 1; i <= n; i++) prefix[i] = prefix[i - 1] + in.nextLong();
        StringBuilder out = new StringBuilder();
        for (int k = 0; k < q; k++) {
            int l = (int) in.nextLong();
            int r = (int) in.nextLong();
            out.append(prefix[r] - prefix[l - 1]).append('\n');
        }
        PrintWriter writer = new PrintWriter(System.out);
        writer.print(out);
        writer.flush();
    }
}
