// Expected verdict: AC. Reads two 64-bit integers and prints their sum.
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder text = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) text.append(line).append(' ');
        StringTokenizer tokens = new StringTokenizer(text.toString());
        long a = Long.parseLong(tokens.nextToken());
        long b = Long.parseLong(tokens.nextToken());
        System.out.println(a + b);
    }
}
