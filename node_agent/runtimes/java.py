"""Java 17: class Main in Main.java.

The heap is sized from the memory limit with -Xmx. The JVM gets no RLIMIT_AS: it reserves
address space far beyond what it touches (compressed class space alone is 1 GiB), so an
address-space cap makes it fail at start-up rather than limiting the program. Memory is
held by -Xmx plus the sandbox watchdog on resident memory; an OutOfMemoryError (the JVM
exits at once with -XX:+ExitOnOutOfMemoryError) is reported as MLE.
"""

from . import RuntimeSpec

SPEC = RuntimeSpec(
    id="java-r1",
    pool="java",
    source_file="Main.java",
    compile=(
        "javac", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-J-Xmx512m", "-J-XX:-UsePerfData",
        "-encoding", "UTF-8", "Main.java",
    ),
    run=(
        "java", "-Xmx{memory_mb}m", "-Xss{stack_mb}m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
        "-XX:+ExitOnOutOfMemoryError", "-XX:ActiveProcessorCount=1", "Main",
    ),
    memory_model="vm",
    vm_overhead_mb=96,
    processes=64,
    compile_processes=128,
    oom_markers=("java.lang.OutOfMemoryError",),
    check=(("javac", "-version"), ("java", "-version")),
)

CHECK_SOURCE = b"""import java.util.Scanner;
public class Main {
    public static void main(String[] args) {
        Scanner in = new Scanner(System.in);
        long a = in.nextLong(), b = in.nextLong();
        System.out.println(a + b);
    }
}
"""
