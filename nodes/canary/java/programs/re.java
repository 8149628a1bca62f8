// Index 1 of a one-element array: ArrayIndexOutOfBoundsException, exit status 1.
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long[] v = {in.nextLong()};
        System.out.println(v[0] + v[1] + in.nextLong());
    }
}
