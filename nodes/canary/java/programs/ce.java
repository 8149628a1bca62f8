// A String assigned to a long: does not compile.
public class Main {
    public static void main(String[] args) {
        long sum = "a + b";
        System.out.println(sum);
    }
}
