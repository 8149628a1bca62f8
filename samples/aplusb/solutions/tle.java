// Expected verdict: TLE. Reads the input, then spins forever.
import java.util.Scanner;

public class Main {
    static volatile long spins = 0;

    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong();
        long b = in.nextLong();
        while (true) {
            spins++;
        }
    }
}
