// Expected verdict: MLE. Allocates 1 GiB (four times the 256 MB limit) in 16 MiB arrays and
// writes to every page, keeping every array reachable so none can be collected.
import java.util.ArrayList;
import java.util.List;
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong();
        long b = in.nextLong();
        final int chunkBytes = 16 << 20;
        final int chunks = 64; // 64 * 16 MiB = 1 GiB
        List<byte[]> held = new ArrayList<>();
        long checksum = 0;
        for (int c = 0; c < chunks; c++) {
            byte[] chunk = new byte[chunkBytes];
            for (int i = 0; i < chunkBytes; i += 4096) chunk[i] = (byte) (i + c);
            held.add(chunk);
            checksum += chunk[chunkBytes / 2];
        }
        if (held.size() != chunks || checksum == Long.MIN_VALUE) System.out.println("unreachable");
        System.out.println(a + b);
    }
}
