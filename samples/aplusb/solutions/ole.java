// Expected verdict: OLE. Forgets to stop: prints the answer again and again, forever,
// in 1 MiB blocks, so it passes any output limit within a fraction of a second.
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Scanner;

public class Main {
    public static void main(String[] args) throws IOException {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong();
        long b = in.nextLong();
        byte[] line = ((a + b) + "\n").getBytes(StandardCharsets.US_ASCII);
        byte[] block = new byte[(1 << 20) / line.length * line.length];
        for (int i = 0; i < block.length; i++) block[i] = line[i % line.length];
        OutputStream out = System.out;
        while (true) {
            out.write(block);
        }
    }
}
