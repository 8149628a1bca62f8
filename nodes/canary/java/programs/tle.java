// Reads the input, then spins; the volatile field keeps the JIT from removing the loop.
import java.util.Scanner;

public class Main {
    static volatile long spins;

    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        spins = in.nextLong() + in.nextLong();
        for (;;) spins++;
    }
}
