// Expected verdict: CE. `prefix` is declared as int[] but initialised with a long[].
import java.util.Scanner;

public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        int n = in.nextInt();
        int q = in.nextInt();
        int[] prefix = new long[n + 1];
        for (int i = 1; i <= n; i++) prefix[i] = prefix[i - 1] + in.nextInt();
        for (int k = 0; k < q; k++) {
            int l = in.nextInt();
            int r = in.nextInt();
            System.out.println(prefix[r] - prefix[l - 1]);
        }
    }
}
