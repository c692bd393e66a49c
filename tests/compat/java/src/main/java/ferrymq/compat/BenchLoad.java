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
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Load generator for bench/broker_bench.py and bench/sweep_bench.py: the official RocketMQ 4.9.7
 * Java client (DefaultMQProducer, DefaultMQPullConsumer, DefaultMQPushConsumer,
 * DefaultLitePullConsumer) against any name server, FerryMQ's or Apache's.
 *
 * <pre>
 * java ferrymq.compat.BenchLoad --namesrv HOST:PORT --topic T [options]
 *   --scenarios sync1,sync64,batch32,pull   what to run, in this order (default these four;
 *                     also batchKxT, push, pushorderly, litepull)
 *   --messages N      messages per send scenario (default 20000); pull drains the topic, the
 *                     other consumers at most N messages of it
 *   --seconds S       time bound per scenario (default 20)
 *   --warmup N        warm-up messages before each scenario, not measured (default 2000)
 *   --size B          body size in bytes (default 1024)
 *   --broker-pid PID  also report that process's CPU time per scenario (Linux /proc)
 * </pre>
 *
 * <p>Scenarios: {@code syncC} = C threads each doing sync {@code send()} on one shared producer
 * (C requests in flight); {@code batchK} = one thread sending batches of K messages,
 * {@code batchKxT} = T threads doing so (T batches in flight);
 * {@code pull} = one thread per queue pulling 32 at a time from offset 0 until no new message.
 * Latency is per request (a send, a batch, a pull). The other consumers drain the topic from
 * its first offset in a consumer group of their own (a new one per scenario), up to
 * {@code --messages} or until nothing arrives for a second, 32 messages per pull:
 * {@code push} = DefaultMQPushConsumer with MessageListenerConcurrently (the client's 20 consume
 * threads), {@code pushorderly} = the same with MessageListenerOrderly (queues locked on the
 * broker), {@code litepull} = DefaultLitePullConsumer polled by one thread, offsets committed
 * automatically. Their rate runs from the first message received to the last (the consumer's
 * start and rebalance are not in it: {@code firstMs} says how long they took); they have no
 * per-request latency.
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
                    String[] kt = scenario.substring(5).split("x");
                    int k = Integer.parseInt(kt[0]);
                    int inFlight = kt.length > 1 ? Integer.parseInt(kt[1]) : 1;
                    Op op = () -> {
                        List<Message> batch = new ArrayList<>(k);
                        for (int i = 0; i < k; i++) {
                            batch.add(new Message(topic, "TagA", body));
                        }
                        check(producer.send(batch));
                    };
                    if (warmup > 0) {
                        sends(inFlight, k, warmup, seconds, op, 0);
                    }
                    result = sends(inFlight, k, messages, seconds, op, brokerPid);
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
                } else if (DRAINS.contains(scenario)) {
                    result = drain(scenario, namesrv, topic, run, messages, seconds, brokerPid);
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

    /** The consumers that drain the topic in a group of their own (see the class comment). */
    private static final List<String> DRAINS = Arrays.asList("push", "pushorderly", "litepull");

    /** Quiet time after which a drain takes the topic as empty. */
    private static final long IDLE_NS = 1000 * MILLIS_NS;

    /** How long a drain waits for its first message (the consumer's start and rebalance). */
    private static final long FIRST_NS = 10_000 * MILLIS_NS;

    /** What a drain saw: messages, and when the first and the last arrived. */
    private static final class Received {
        final AtomicLong count = new AtomicLong();
        final AtomicLong firstNs = new AtomicLong();
        final AtomicLong lastNs = new AtomicLong();

        void add(int n) {
            long now = System.nanoTime();
            firstNs.compareAndSet(0, now);
            lastNs.set(now);
            count.addAndGet(n);
        }

        /** Whether to stop: enough messages, the deadline, or nothing for a while. */
        boolean over(long total, long started, long deadline) {
            long now = System.nanoTime();
            long last = lastNs.get();
            boolean quiet = last == 0 ? now - started >= FIRST_NS : now - last >= IDLE_NS;
            return count.get() >= total || now >= deadline || quiet;
        }
    }

    private static Map<String, Object> drain(String kind, String namesrv, String topic, String run, long total,
                                             long seconds, long brokerPid) throws Exception {
        String group = "bench_" + kind + "_" + run + "_" + Long.toHexString(System.nanoTime());
        Received got = new Received();
        long cpu0 = selfCpuNs();
        long broker0 = procCpuTicks(brokerPid);
        long t0 = System.nanoTime();
        long deadline = t0 + seconds * 1000 * MILLIS_NS;
        if (kind.equals("litepull")) {
            litePull(namesrv, topic, group, got, total, t0, deadline);
        } else {
            push(kind.equals("pushorderly"), namesrv, topic, group, got, total, t0, deadline);
        }
        long first = got.firstNs.get();
        long elapsed = first == 0 ? 0 : got.lastNs.get() - first;
        Map<String, Object> m = summary(new Lat[0], got.count.get(), 0, null, elapsed, cpu0, broker0, brokerPid);
        m.put("firstMs", first == 0 ? null : (first - t0) / 1e6);
        return m;
    }

    /** A drain's client: its own instance, so no other client in this JVM shares its connections. */
    private static void named(ClientConfig c, String namesrv, String group) {
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(group);
    }

    private static void push(boolean orderly, String namesrv, String topic, String group, Received got, long total,
                             long started, long deadline) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        named(c, namesrv, group);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(32);
        c.subscribe(topic, "*");
        if (orderly) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                got.add(msgs.size());
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                got.add(msgs.size());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        try {
            while (!got.over(total, started, deadline)) {
                TimeUnit.MILLISECONDS.sleep(5);
            }
        } finally {
            c.shutdown();
        }
    }

    private static void litePull(String namesrv, String topic, String group, Received got, long total, long started,
                                 long deadline) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        named(c, namesrv, group);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(32);
        c.subscribe(topic, "*");
        c.start();
        try {
            while (!got.over(total, started, deadline)) {
                int n = c.poll(100).size();
                if (n > 0) {
                    got.add(n);
                }
            }
        } finally {
            c.shutdown();
        }
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
