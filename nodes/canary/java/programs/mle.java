// Keeps 512 MiB (four times the 128 MB limit) of 16 MiB arrays reachable, touching every page.
import java.util.ArrayList;
import java.util.List;
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong(), b = in.nextLong();
        List<byte[]> held = new ArrayList<>();
        for (int c = 0; c < 32; c++) {
            byte[] block = new byte[16 << 20];
            for (int i = 0; i < block.length; i += 4096) block[i] = (byte) (i + c);
            held.add(block);
        }
        System.out.println(held.size() == 32 ? a + b : 0);
    }
}
