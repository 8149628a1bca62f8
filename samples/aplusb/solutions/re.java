// Expected verdict: RE. The array is one element too short; the uncaught
// ArrayIndexOutOfBoundsException ends the JVM with a non-zero exit status.
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long[] values = new long[1];
        values[0] = in.nextLong();
        values[1] = in.nextLong();
        System.out.println(values[0] + values[1]);
    }
}
