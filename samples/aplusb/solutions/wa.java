// Expected verdict: WA. String concatenation instead of addition: "" + a + b prints
// the two numbers glued together ("12" for "1 2").
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong();
        long b = in.nextLong();
        System.out.println("" + a + b);
    }
}
