package ferrymq.compat53;

import static ferrymq.compat53.Program.bytes;
import static ferrymq.compat53.Program.emit;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Load generator for bench/timer_bench.py: timer messages through the Apache RocketMQ 5.3.1
 * remoting client ({@code setDeliverTimeMs}), against any name server, FerryMQ's or Apache's.
 *
 * <pre>
 * java ferrymq.compat53.TimerBench --namesrv HOST:PORT --topic T --mode lateness|throughput|pending
 *   lateness:   --load-topic LT --rate R --load-seconds S --timers N --min-delay-ms A --max-delay-ms B
 *               ordinary async sends to LT paced at R/s for S s; meanwhile N timers, sent evenly over
 *               the first S - B/1000 s, each due a uniform A..B ms after its send; a push consumer
 *               on T records receive time minus due time per timer
 *   throughput: --timers N --due-in-ms D   N timers sent as fast as the client allows (async,
 *               --inflight in flight), all due at start + D; schedule rate = acks/s, fire rate =
 *               deliveries/s from the due time to the last delivery
 *   pending:    --timers N --due-in-ms D   N timers due D ms ahead (spread over the next hour
 *               after that), no consumer; prints the schedule rate and exits
 *   common:     --inflight K (default 512) --size B (timer body, default 128) --load-size B (1024)
 *               --timeout-ms MS (deadline for the deliveries, default 120000) --group G
 * </pre>
 *
 * <p>Every timer carries its due time as the user property {@code benchDueMs}; the consumer's
 * lateness is {@code receivedAt - benchDueMs} (negative = early). stdout carries JSON lines only:
 * {@code {"event":"result",...}} then {@code {"event":"done"}}. Exit 0 unless the program failed.
 */
public final class TimerBench {

    private static final String DUE = "benchDueMs";
    private static final int BUSY_RETRIES = 50;

    public static void main(String[] argv) {
        Map<String, String> a = new LinkedHashMap<>();
        a.put("--mode", "lateness");
        a.put("--rate", "10000");
        a.put("--load-seconds", "40");
        a.put("--timers", "2000");
        a.put("--min-delay-ms", "2000");
        a.put("--max-delay-ms", "20000");
        a.put("--due-in-ms", "30000");
        a.put("--inflight", "512");
        a.put("--size", "128");
        a.put("--load-size", "1024");
        a.put("--timeout-ms", "120000");
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i], argv[i + 1]);
        }
        int rc = 0;
        try {
            new TimerBench(a).run();
            emit("event", "done");
        } catch (Throwable t) {
            t.printStackTrace();
            emit("event", "error", "error", String.valueOf(t));
            rc = 1;
        }
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    private final Map<String, String> a;
    private final String namesrv;
    private final String topic;
    private final String group;
    private final int timers;
    private final long[] lateness;
    private final long[] storedLateness;  // the fired message's store time minus the due time
    private final AtomicInteger received = new AtomicInteger();
    private final AtomicInteger duplicates = new AtomicInteger();
    private final AtomicLong firstReceived = new AtomicLong(Long.MAX_VALUE);
    private final AtomicLong lastReceived = new AtomicLong();
    private final Set<String> seen = ConcurrentHashMap.newKeySet();
    private final CountDownLatch ready = new CountDownLatch(1);
    private final Object progress = new Object();

    private TimerBench(Map<String, String> a) {
        this.a = a;
        this.namesrv = req("--namesrv");
        this.topic = req("--topic");
        this.group = a.getOrDefault("--group", "GTimerBench" + UUID.randomUUID().toString().substring(0, 8));
        this.timers = num("--timers");
        this.lateness = new long[timers];
        this.storedLateness = new long[timers];
    }

    private String req(String k) {
        String v = a.get(k);
        if (v == null) {
            throw new IllegalArgumentException(k + " is required");
        }
        return v;
    }

    private int num(String k) {
        return Integer.parseInt(a.get(k));
    }

    private void run() throws Exception {
        String mode = a.get("--mode");
        DefaultMQProducer producer = producer("timers");
        DefaultMQPushConsumer consumer = null;
        try {
            if (!"pending".equals(mode)) {
                consumer = consumer();
            }
            switch (mode) {
                case "lateness":
                    lateness(producer);
                    break;
                case "throughput":
                    throughput(producer);
                    break;
                case "pending":
                    pending(producer);
                    break;
                default:
                    throw new IllegalArgumentException("unknown --mode " + mode);
            }
        } finally {
            if (consumer != null) {
                consumer.shutdown();
            }
            producer.shutdown();
        }
    }

    private DefaultMQProducer producer(String name) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group + "_P_" + name);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(name + "-" + UUID.randomUUID().toString().substring(0, 8));
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.start();
        return p;
    }

    /** A push consumer on the timer topic, started after one plain message made the topic exist. */
    private DefaultMQPushConsumer consumer() throws Exception {
        String readyKey = "ready-" + UUID.randomUUID();
        DefaultMQProducer p = producer("ready");
        long deadline = System.currentTimeMillis() + 60000;
        while (true) {
            try {
                p.send(new Message(topic, "ready", readyKey, bytes(readyKey)));
                break;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
        p.shutdown();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(32);
        c.setPullBatchSize(32);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                String due = m.getUserProperty(DUE);
                if (due == null) {
                    if (readyKey.equals(m.getKeys())) {
                        ready.countDown();
                    }
                    continue;
                }
                if (!seen.add(m.getKeys())) {
                    duplicates.incrementAndGet();
                    continue;
                }
                int i = received.getAndIncrement();
                if (i < lateness.length) {
                    lateness[i] = now - Long.parseLong(due);
                    storedLateness[i] = m.getStoreTimestamp() - Long.parseLong(due);
                }
                firstReceived.accumulateAndGet(now, Math::min);
                lastReceived.accumulateAndGet(now, Math::max);
            }
            synchronized (progress) {
                progress.notifyAll();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        if (!ready.await(60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("the plain message did not reach the consumer in 60 s");
        }
        return c;
    }

    /** Async sends with at most --inflight outstanding; counts acks and failures. */
    private static final class Sender {
        final DefaultMQProducer producer;
        final Semaphore inflight;
        final int permits;
        final AtomicLong acked = new AtomicLong();
        final AtomicLong failed = new AtomicLong();
        final AtomicLong lastAckMs = new AtomicLong();
        final AtomicReference<String> firstError = new AtomicReference<>();

        Sender(DefaultMQProducer producer, int permits) {
            this.producer = producer;
            this.permits = permits;
            this.inflight = new Semaphore(permits);
        }

        final AtomicLong busyRetries = new AtomicLong();
        /** Busy refusals by the reason the broker gave: its remark's leading [TAG], or the error's class. */
        final Map<String, AtomicLong> busyReasons = new ConcurrentHashMap<>();

        void send(Message m) throws InterruptedException {
            inflight.acquire();
            attempt(m, BUSY_RETRIES);
        }

        /** One async send holding a permit; a flow-control refusal (broker busy) is sent again. */
        private void attempt(Message m, int retriesLeft) {
            try {
                producer.send(m, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        if (r.getSendStatus() == SendStatus.SEND_OK) {
                            acked.incrementAndGet();
                        } else {
                            fail(String.valueOf(r.getSendStatus()));
                        }
                        lastAckMs.accumulateAndGet(System.currentTimeMillis(), Math::max);
                        inflight.release();
                    }

                    @Override
                    public void onException(Throwable e) {
                        if (retriesLeft > 0 && isBusy(e)) {
                            busyRetries.incrementAndGet();
                            busyReasons.computeIfAbsent(busyReason(e), k -> new AtomicLong()).incrementAndGet();
                            attempt(m, retriesLeft - 1);
                            return;
                        }
                        fail(String.valueOf(e));
                        inflight.release();
                    }
                });
            } catch (Exception e) {
                fail(String.valueOf(e));
                inflight.release();
            }
        }

        private static boolean isBusy(Throwable e) {
            String s = String.valueOf(e);
            return s.contains("broker busy") || s.contains("SYSTEM_BUSY") || s.contains("TIMEOUT_CLEAN_QUEUE")
                || s.contains("[PC_");
        }

        private static String busyReason(Throwable e) {
            String s = String.valueOf(e);
            int open = s.indexOf('['), close = s.indexOf(']', open + 1);
            return open >= 0 && close > open ? s.substring(open, close + 1) : e.getClass().getSimpleName();
        }

        Map<String, Long> busyReasonCounts() {
            Map<String, Long> counts = new LinkedHashMap<>();
            busyReasons.forEach((k, v) -> counts.put(k, v.get()));
            return counts;
        }

        void fail(String why) {
            failed.incrementAndGet();
            firstError.compareAndSet(null, why);
        }

        /** Until every send has been answered (or ``timeoutMs``). */
        void drain(long timeoutMs) throws InterruptedException {
            if (inflight.tryAcquire(permits, timeoutMs, TimeUnit.MILLISECONDS)) {
                inflight.release(permits);
            }
        }
    }

    private Message timer(int i, long dueMs, byte[] body) {
        Message m = new Message(topic, "timer", "t" + i, body);
        m.setDeliverTimeMs(dueMs);
        m.putUserProperty(DUE, Long.toString(dueMs));
        return m;
    }

    private void lateness(DefaultMQProducer timerProducer) throws Exception {
        String loadTopic = req("--load-topic");
        int rate = num("--rate");
        long loadMs = num("--load-seconds") * 1000L;
        long minDelay = num("--min-delay-ms");
        long maxDelay = num("--max-delay-ms");
        long timerWindow = Math.max(1000, loadMs - maxDelay);
        DefaultMQProducer loadProducer = producer("load");
        Sender load = new Sender(loadProducer, num("--inflight"));
        Sender timerSender = new Sender(timerProducer, 64);
        byte[] loadBody = new byte[num("--load-size")];
        byte[] timerBody = new byte[num("--size")];
        java.util.Random random = new java.util.Random(31);
        long start = System.currentTimeMillis();
        Thread timerThread = new Thread(() -> {
            try {
                for (int i = 0; i < timers; i++) {
                    long at = start + i * timerWindow / timers;
                    long wait = at - System.currentTimeMillis();
                    if (wait > 0) {
                        Thread.sleep(wait);
                    }
                    long delay = minDelay + (long) (random.nextDouble() * (maxDelay - minDelay));
                    timerSender.send(timer(i, System.currentTimeMillis() + delay, timerBody));
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "timers");
        timerThread.start();
        long sent = 0;
        long now;
        while ((now = System.currentTimeMillis()) - start < loadMs) {
            long due = (now - start) * rate / 1000;
            if (sent >= due) {
                Thread.sleep(1);
                continue;
            }
            for (int k = 0; k < 64 && sent < due; k++, sent++) {
                load.send(new Message(loadTopic, "load", loadBody));
            }
        }
        long loadEnd = System.currentTimeMillis();
        timerThread.join();
        load.drain(30000);
        timerSender.drain(30000);
        long sentTimers = timerSender.acked.get();
        waitReceived(sentTimers, Long.parseLong(a.get("--timeout-ms")));
        loadProducer.shutdown();
        Map<String, Object> r = latenessSummary();
        emit("event", "result", "mode", "lateness", "targetRate", rate, "loadSent", sent,
            "loadAcked", load.acked.get(), "loadFailed", load.failed.get(),
            "loadRate", 1000.0 * load.acked.get() / Math.max(1, loadEnd - start),
            "loadFirstError", load.firstError.get(), "loadBusyRetries", load.busyRetries.get(),
            "loadBusyReasons", load.busyReasonCounts(), "timersAcked", sentTimers, "timersFailed", timerSender.failed.get(),
            "timersFirstError", timerSender.firstError.get(),
            "received", Math.min(received.get(), timers), "duplicates", duplicates.get(), "lateness", r,
            "storedLateness", summary(storedLateness));
    }

    private void throughput(DefaultMQProducer producer) throws Exception {
        Sender s = new Sender(producer, num("--inflight"));
        long start = System.currentTimeMillis();
        long due = start + num("--due-in-ms");
        long scheduled = schedule(s, due, 0);
        waitReceived(s.acked.get(), Math.max(0, due - System.currentTimeMillis()) + Long.parseLong(a.get("--timeout-ms")));
        long last = lastReceived.get();
        long n = Math.min(received.get(), timers);
        emit("event", "result", "mode", "throughput", "timers", timers, "acked", s.acked.get(),
            "failed", s.failed.get(), "firstError", s.firstError.get(), "busyRetries", s.busyRetries.get(),
            "scheduleSeconds", (scheduled - start) / 1000.0,
            "scheduleRate", 1000.0 * s.acked.get() / Math.max(1, scheduled - start),
            "dueAfterScheduledMs", due - scheduled,
            "received", n, "duplicates", duplicates.get(),
            "firstReceivedAfterDueMs", n > 0 ? firstReceived.get() - due : null,
            "lastReceivedAfterDueMs", n > 0 ? last - due : null,
            "fireRate", n > 0 ? 1000.0 * n / Math.max(1, last - Math.max(due, scheduled)) : null,
            "lateness", latenessSummary(), "storedLateness", summary(storedLateness));
    }

    private void pending(DefaultMQProducer producer) throws Exception {
        Sender s = new Sender(producer, num("--inflight"));
        long start = System.currentTimeMillis();
        long scheduled = schedule(s, start + num("--due-in-ms"), 3600);
        emit("event", "result", "mode", "pending", "timers", timers, "acked", s.acked.get(),
            "failed", s.failed.get(), "firstError", s.firstError.get(), "busyRetries", s.busyRetries.get(),
            "scheduleSeconds", (scheduled - start) / 1000.0,
            "scheduleRate", 1000.0 * s.acked.get() / Math.max(1, scheduled - start));
    }

    /** Sends --timers timers as fast as ``s`` allows, due at ``due`` (spread over ``spreadSeconds``
     * one-second slots after it when that is not 0); the time of the last acknowledgement. */
    private long schedule(Sender s, long due, int spreadSeconds) throws InterruptedException {
        byte[] body = new byte[num("--size")];
        for (int i = 0; i < timers; i++) {
            s.send(timer(i, spreadSeconds == 0 ? due : due + (i % spreadSeconds) * 1000L, body));
        }
        s.drain(60000);
        return s.lastAckMs.get();
    }

    private void waitReceived(long expect, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        synchronized (progress) {
            long left;
            while (received.get() < expect && (left = deadline - System.currentTimeMillis()) > 0) {
                progress.wait(Math.min(left, 1000));
            }
        }
    }

    private Map<String, Object> latenessSummary() {
        return summary(lateness);
    }

    /** count, early (< 0), min, p50, p99, max of the first ``received`` values of ``values``. */
    private Map<String, Object> summary(long[] values) {
        int n = Math.min(received.get(), values.length);
        long[] v = Arrays.copyOf(values, n);
        Arrays.sort(v);
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("count", n);
        long early = 0;
        for (long x : v) {
            if (x < 0) {
                early++;
            }
        }
        r.put("early", early);
        r.put("minMs", n > 0 ? v[0] : null);
        r.put("p50Ms", n > 0 ? v[(int) Math.min(n - 1, Math.ceil(0.50 * n) - 1)] : null);
        r.put("p99Ms", n > 0 ? v[(int) Math.min(n - 1, Math.ceil(0.99 * n) - 1)] : null);
        r.put("maxMs", n > 0 ? v[n - 1] : null);
        return r;
    }
}
