// Expected verdict: CE. Assigns a String to a long.
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong();
        long b = in.nextLong();
        long sum = "a + b";
        System.out.println(sum);
    }
}
