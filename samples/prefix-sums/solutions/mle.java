// Expected verdict: MLE. Correct answers, but first allocates 1 GiB (four times the 256 MB
// limit) in 16 MiB arrays and writes to every page, keeping every array reachable.
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;

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
        final int chunkBytes = 16 << 20;
        List<byte[]> held = new ArrayList<>();
        long checksum = 0;
        for (int c = 0; c < 64; c++) { // 64 * 16 MiB = 1 GiB
            byte[] chunk = new byte[chunkBytes];
            for (int i = 0; i < chunkBytes; i += 4096) chunk[i] = (byte) (i + c);
            held.add(chunk);
            checksum += chunk[chunkBytes / 2];
        }
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
        if (held.size() != 64 || checksum == Long.MIN_VALUE) out.append("unreachable\n");
        PrintWriter writer = new PrintWriter(System.out);
        writer.print(out);
        writer.flush();
    }
}
