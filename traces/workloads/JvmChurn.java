// A JVM workload: objects of 64 B to 4 MiB allocated in a window of live ones
// (the oldest dropped, so the collector frees and reuses the heap, which grows
// and shrinks), and every two seconds a 64 MiB file written, read back and
// deleted (page cache in and out); paced to run for the given seconds.
//
//   java -Xms32m -Xmx1g -XX:+UseSerialGC traces/workloads/JvmChurn.java 30
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Random;

public class JvmChurn {
    public static void main(String[] args) throws IOException {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 40.0;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        Random rng = new Random(13);
        ArrayDeque<byte[]> window = new ArrayDeque<>();
        long live = 0;
        long nextFile = System.nanoTime();
        byte[] chunk = new byte[1 << 20];
        long sink = 0;
        while (System.nanoTime() < end) {
            // Sizes spread over five orders of magnitude, small ones most often.
            int size = 64 << rng.nextInt(17);
            byte[] b = new byte[size];
            for (int i = 0; i < size; i += 4096) {
                b[i] = 1;
            }
            window.addLast(b);
            live += size;
            while (live > (256L << 20)) {
                live -= window.removeFirst().length;
            }
            if (System.nanoTime() >= nextFile) {
                nextFile += 2_000_000_000L;
                File f = File.createTempFile("jvmchurn", ".bin");
                try (FileOutputStream out = new FileOutputStream(f)) {
                    for (int i = 0; i < 64; i++) {
                        out.write(chunk);
                    }
                }
                try (FileInputStream in = new FileInputStream(f)) {
                    int n;
                    while ((n = in.read(chunk)) > 0) {
                        sink += n;
                    }
                }
                f.delete();
            }
        }
        System.out.println("done " + sink);
    }
}
