package ferrymq.compat;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Load generator for bench/broker_bench.py: the official RocketMQ 4.9.7 Java client
 * (DefaultMQProducer, DefaultMQPullConsumer) against any name server, FerryMQ's or Apache's.
 *
 * <pre>
 * java ferrymq.compat.BenchLoad --namesrv HOST:PORT --topic T [options]
 *   --scenarios sync1,sync64,batch32,pull   what to run, in this order (default all four)
 *   --messages N      messages per send scenario (default 20000); pull drains the topic
 *   --seconds S       time bound per scenario (default 20)
 *   --warmup N        warm-up messages before each scenario, not measured (default 2000)
 *   --size B          body size in bytes (default 1024)
 *   --broker-pid PID  also report that process's CPU time per scenario (Linux /proc)
 * </pre>
 *
 * <p>Scenarios: {@code syncC} = C threads each doing sync {@code send()} on one shared producer
 * (C requests in flight); {@code batchK} = one thread sending batches of K messages;
 * {@code pull} = one thread per queue pulling 32 at a time from offset 0 until no new message.
 * Latency is per request (a send, a batch, a pull).
 *
 * <p>stdout carries JSON lines only: one {@code {"event":"result",...}} per scenario, then
 * {@code {"event":"done"}}. Exit 0 unless the program itself failed.
 */
public final class BenchLoad {

    private static final long MILLIS_NS = 1_000_000L;

    public static void main(String[] argv) {
        int rc = 0;
        try {
            run(parse(argv));
        } catch (Throwable t) {
            t.printStackTrace();
            emit(obj("event", "error", "error", String.valueOf(t)));
            rc = 1;
        }
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> o = new HashMap<>();
        o.put("scenarios", "sync1,sync64,batch32,pull");
        o.put("messages", "20000");
        o.put("seconds", "20");
        o.put("warmup", "2000");
        o.put("size", "1024");
        o.put("broker-pid", "0");
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("bad argument " + argv[i]);
            }
            o.put(argv[i].substring(2), argv[++i]);
        }
        if (!o.containsKey("namesrv") || !o.containsKey("topic")) {
            throw new IllegalArgumentException("--namesrv and --topic are required");
        }
        return o;
    }

    private static void run(Map<String, String> o) throws Exception {
        String namesrv = o.get("namesrv");
        String topic = o.get("topic");
        int messages = Integer.parseInt(o.get("messages"));
        long seconds = Long.parseLong(o.get("seconds"));
        int warmup = Integer.parseInt(o.get("warmup"));
        int size = Integer.parseInt(o.get("size"));
        long brokerPid = Long.parseLong(o.get("broker-pid"));
        String run = ProcessHandle.current().pid() + "_" + Long.toHexString(System.nanoTime());

        byte[] body = new byte[size];
        for (int i = 0; i < size; i++) {
            body[i] = (byte) ('a' + i % 26);
        }

        DefaultMQProducer producer = new DefaultMQProducer("bench_p_" + run);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("bench-" + run);
        producer.setSendMsgTimeout(10000);
        producer.start();
        DefaultMQPullConsumer consumer = null;
        try {
            for (String scenario : o.get("scenarios").split(",")) {
                scenario = scenario.trim();
                Map<String, Object> result;
                if (scenario.startsWith("sync")) {
                    int threads = Integer.parseInt(scenario.substring(4));
                    Op op = () -> check(producer.send(new Message(topic, "TagA", body)));
                    if (warmup > 0) {
                        sends(threads, 1, warmup, seconds, op, 0);
                    }
                    result = sends(threads, 1, messages, seconds, op, brokerPid);
                } else if (scenario.startsWith("batch")) {
                    int k = Integer.parseInt(scenario.substring(5));
                    Op op = () -> {
                        List<Message> batch = new ArrayList<>(k);
                        for (int i = 0; i < k; i++) {
                            batch.add(new Message(topic, "TagA", body));
                        }
                        check(producer.send(batch));
                    };
                    if (warmup > 0) {
                        sends(1, k, warmup, seconds, op, 0);
                    }
                    result = sends(1, k, messages, seconds, op, brokerPid);
                } else if (scenario.equals("pull")) {
                    if (consumer == null) {
                        consumer = new DefaultMQPullConsumer("bench_c_" + run);
                        consumer.setNamesrvAddr(namesrv);
                        consumer.setInstanceName("bench-" + run + "-C");
                        consumer.start();
                    }
                    if (warmup > 0) {
                        pulls(consumer, topic, warmup, seconds, 0);
                    }
                    result = pulls(consumer, topic, Integer.MAX_VALUE, seconds, brokerPid);
                } else {
                    throw new IllegalArgumentException("unknown scenario " + scenario);
                }
                result.put("scenario", scenario);
                emit(result);
            }
        } finally {
            producer.shutdown();
            if (consumer != null) {
                consumer.shutdown();
            }
        }
        emit(obj("event", "done"));
    }

    private static void check(SendResult r) {
        if (r.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send status " + r.getSendStatus());
        }
    }

    private interface Op {
        void call() throws Exception;
    }

    /** A growable long[] of latencies (ns), one per worker thread. */
    private static final class Lat {
        long[] v = new long[4096];
        int n;

        void add(long x) {
            if (n == v.length) {
                v = Arrays.copyOf(v, n * 2);
            }
            v[n++] = x;
        }
    }

    /** {@code threads} workers run {@code op} (each worth {@code perOp} messages) until
     * {@code total} messages are claimed or {@code seconds} pass. */
    private static Map<String, Object> sends(int threads, int perOp, int total, long seconds, Op op, long brokerPid)
        throws Exception {
        AtomicInteger claimed = new AtomicInteger();
        AtomicLong done = new AtomicLong();
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        Lat[] lats = new Lat[threads];
        Thread[] ts = new Thread[threads];
        long cpu0 = selfCpuNs();
        long broker0 = procCpuTicks(brokerPid);
        long t0 = System.nanoTime();
        long deadline = t0 + seconds * 1000 * MILLIS_NS;
        for (int w = 0; w < threads; w++) {
            Lat lat = lats[w] = new Lat();
            ts[w] = new Thread(() -> {
                while (claimed.addAndGet(perOp) <= total && System.nanoTime() < deadline) {
                    long s = System.nanoTime();
                    try {
                        op.call();
                        lat.add(System.nanoTime() - s);
                        done.addAndGet(perOp);
                    } catch (Throwable e) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, String.valueOf(e));
                    }
                }
            }, "bench-" + w);
            ts[w].start();
        }
        for (Thread t : ts) {
            t.join();
        }
        long elapsed = System.nanoTime() - t0;
        return summary(lats, done.get(), errors.get(), firstError.get(), elapsed, cpu0, broker0, brokerPid);
    }

    /** One thread per queue pulls 32 at a time from offset 0 until nothing new, the bound or the deadline. */
    private static Map<String, Object> pulls(DefaultMQPullConsumer consumer, String topic, int total, long seconds,
                                             long brokerPid) throws Exception {
        List<MessageQueue> queues = new ArrayList<>(consumer.fetchSubscribeMessageQueues(topic));
        AtomicLong done = new AtomicLong();
        AtomicInteger claimed = new AtomicInteger();
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        Lat[] lats = new Lat[queues.size()];
        Thread[] ts = new Thread[queues.size()];
        long cpu0 = selfCpuNs();
        long broker0 = procCpuTicks(brokerPid);
        long t0 = System.nanoTime();
        long deadline = t0 + seconds * 1000 * MILLIS_NS;
        for (int w = 0; w < queues.size(); w++) {
            MessageQueue mq = queues.get(w);
            Lat lat = lats[w] = new Lat();
            ts[w] = new Thread(() -> {
                long offset = 0;
                while (claimed.get() < total && System.nanoTime() < deadline) {
                    long s = System.nanoTime();
                    try {
                        PullResult r = consumer.pull(mq, "*", offset, 32, 10000);
                        lat.add(System.nanoTime() - s);
                        if (r.getPullStatus() != PullStatus.FOUND) {
                            break;
                        }
                        int n = r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size();
                        done.addAndGet(n);
                        claimed.addAndGet(n);
                        offset = r.getNextBeginOffset();
                    } catch (Throwable e) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, String.valueOf(e));
                        if (errors.get() > 100) {
                            break;
                        }
                    }
                }
            }, "pull-" + mq.getQueueId());
            ts[w].start();
        }
        for (Thread t : ts) {
            t.join();
        }
        long elapsed = System.nanoTime() - t0;
        Map<String, Object> m = summary(lats, done.get(), errors.get(), firstError.get(), elapsed, cpu0, broker0, brokerPid);
        m.put("queues", queues.size());
        return m;
    }

    private static Map<String, Object> summary(Lat[] lats, long messages, int errors, String firstError, long elapsedNs,
                                               long cpu0, long broker0, long brokerPid) {
        int n = 0;
        for (Lat l : lats) {
            n += l.n;
        }
        long[] all = new long[n];
        int i = 0;
        for (Lat l : lats) {
            System.arraycopy(l.v, 0, all, i, l.n);
            i += l.n;
        }
        Arrays.sort(all);
        Map<String, Object> m = obj("event", "result");
        m.put("messages", messages);
        m.put("requests", n);
        m.put("errors", errors);
        m.put("firstError", firstError);
        m.put("elapsedS", elapsedNs / 1e9);
        m.put("msgsPerSec", elapsedNs > 0 ? messages * 1e9 / elapsedNs : 0.0);
        m.put("p50Ms", pct(all, 0.50));
        m.put("p99Ms", pct(all, 0.99));
        m.put("maxMs", n > 0 ? all[n - 1] / 1e6 : null);
        m.put("clientCpuS", (selfCpuNs() - cpu0) / 1e9);
        if (brokerPid > 0) {
            m.put("brokerCpuS", (procCpuTicks(brokerPid) - broker0) / 100.0);
        }
        return m;
    }

    /** Nearest-rank percentile, in ms. */
    private static Object pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return null;
        }
        int idx = (int) Math.ceil(p * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, idx))] / 1e6;
    }

    private static long selfCpuNs() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return 0;
    }

    /** utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux), 0 if unknown. */
    private static long procCpuTicks(long pid) {
        if (pid <= 0) {
            return 0;
        }
        try {
            String s = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")), StandardCharsets.US_ASCII);
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(f[11]) + Long.parseLong(f[12]);
        } catch (Exception e) {
            return 0;
        }
    }

    // ------------------------------------------------------------------ JSON lines

    private static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    private static void emit(Map<String, Object> m) {
        StringBuilder sb = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> e : m.entrySet()) {
            if (!first) {
                sb.append(',');
            }
            first = false;
            str(sb, e.getKey());
            sb.append(':');
            Object v = e.getValue();
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Double) {
                double d = (Double) v;
                sb.append(Double.isFinite(d) ? Double.toString(d) : "null");
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else {
                str(sb, v.toString());
            }
        }
        sb.append('}');
        synchronized (BenchLoad.class) {
            System.out.println(sb);
            System.out.flush();
        }
    }

    private static void str(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        sb.append('"');
    }

    private BenchLoad() {
    }
}
