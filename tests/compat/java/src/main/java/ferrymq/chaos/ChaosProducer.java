package ferrymq.chaos;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * The fault-injection suite's producer (docs/chaos.md): the official RocketMQ 4.9.7 client sending
 * keyed messages at a steady, bounded rate, one JSON line per send attempt in its history file.
 *
 * <pre>
 * java ferrymq.chaos.ChaosProducer --namesrv H:P --topic T --out FILE|- [--duration-ms 60000]
 *      [--rate 50] [--threads 2] [--key-prefix P] [--body-size 128] [--send-timeout-ms 3000]
 *      [--retries 0] [--group G] [--instance NAME] [--poll-namesrv-ms 1000]
 * </pre>
 *
 * <p>Keys are P-0, P-1, ... in the order of their slots: at most --rate slots a second (no burst to
 * catch up after a stall), each taken by one of --threads sending threads with a synchronous send.
 * With --retries 0 (the default) every line is exactly one attempt of one key; no key is sent twice.
 *
 * <p>History lines: {"op":"send","key","digest","t0","t1","status","msgId","offsetMsgId","broker",
 * "queue","offset","error","code","producer"} (times in ms since the epoch; status a SendStatus or
 * FAILED), plus "meta" lines at the start and the end. Progress goes to stdout (to stderr with
 * --out -) as {"event":"progress",...} every second and {"event":"done",...} at the end. It stops
 * after --duration-ms, or on SIGTERM: the sends in flight finish (or time out), then the file is
 * flushed and closed.
 */
public final class ChaosProducer {

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Jsonl.args(argv, "namesrv", "topic", "out", "duration-ms", "rate", "threads",
            "key-prefix", "body-size", "send-timeout-ms", "retries", "group", "instance", "poll-namesrv-ms");
        String topic = need(a, "topic");
        String out = need(a, "out");
        long durationMs = Long.parseLong(a.getOrDefault("duration-ms", "60000"));
        double rate = Double.parseDouble(a.getOrDefault("rate", "50"));
        int threads = Integer.parseInt(a.getOrDefault("threads", "2"));
        String prefix = a.getOrDefault("key-prefix", "k" + Long.toString(System.currentTimeMillis(), 36));
        int bodySize = Integer.parseInt(a.getOrDefault("body-size", "128"));
        int timeoutMs = Integer.parseInt(a.getOrDefault("send-timeout-ms", "3000"));
        String instance = a.getOrDefault("instance", "chaos-producer-" + ProcessHandle.current().pid());

        DefaultMQProducer producer = new DefaultMQProducer(a.getOrDefault("group", "chaos_producer"));
        if (a.containsKey("namesrv")) {
            producer.setNamesrvAddr(a.get("namesrv"));
        }
        producer.setInstanceName(instance);
        producer.setSendMsgTimeout(timeoutMs);
        producer.setRetryTimesWhenSendFailed(Integer.parseInt(a.getOrDefault("retries", "0")));
        producer.setPollNameServerInterval(Integer.parseInt(a.getOrDefault("poll-namesrv-ms", "1000")));

        Jsonl history = new Jsonl(out);
        boolean stderr = history.onStdout();
        history.write(Jsonl.obj("op", "meta", "role", "producer", "instance", instance, "topic", topic,
            "rate", rate, "threads", threads, "keyPrefix", prefix, "sendTimeoutMs", timeoutMs,
            "start", System.currentTimeMillis()));
        producer.start();

        final long periodNanos = (long) (1e9 / rate);
        final long begin = System.nanoTime();
        final long end = begin + TimeUnit.MILLISECONDS.toNanos(durationMs);
        final AtomicLong nextSlot = new AtomicLong(begin);
        final AtomicLong seq = new AtomicLong();
        final AtomicLong attempts = new AtomicLong(), acked = new AtomicLong(), notAcked = new AtomicLong(),
            failed = new AtomicLong();
        final AtomicReference<String> lastError = new AtomicReference<>();
        final CountDownLatch finished = new CountDownLatch(1);
        final boolean[] stopping = {false};

        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            synchronized (stopping) {
                stopping[0] = true;
            }
            try {
                finished.await(timeoutMs + 5000L, TimeUnit.MILLISECONDS);
            } catch (InterruptedException ignored) {
                // exiting anyway
            }
            history.close();
        }, "chaos-producer-stop"));

        List<Thread> workers = new ArrayList<>();
        for (int w = 0; w < threads; w++) {
            Thread t = new Thread(() -> {
                while (true) {
                    synchronized (stopping) {
                        if (stopping[0]) {
                            return;
                        }
                    }
                    // The next slot: never earlier than now (no burst after a stall), period apart.
                    long slot;
                    while (true) {
                        long cur = nextSlot.get();
                        slot = Math.max(cur, System.nanoTime());
                        if (nextSlot.compareAndSet(cur, slot + periodNanos)) {
                            break;
                        }
                    }
                    if (slot >= end) {
                        return;
                    }
                    long wait = slot - System.nanoTime();
                    if (wait > 0) {
                        try {
                            TimeUnit.NANOSECONDS.sleep(wait);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                    String key = prefix + "-" + seq.getAndIncrement();
                    byte[] body = body(key, bodySize);
                    Message msg = new Message(topic, "chaos", key, body);
                    long t0 = System.currentTimeMillis();
                    Map<String, Object> line;
                    try {
                        SendResult r = producer.send(msg, timeoutMs);
                        long t1 = System.currentTimeMillis();
                        String status = r.getSendStatus().name();
                        (status.equals("SEND_OK") ? acked : notAcked).incrementAndGet();
                        line = Jsonl.obj("op", "send", "key", key, "digest", Jsonl.digest(body), "t0", t0, "t1", t1,
                            "status", status, "msgId", r.getMsgId(), "offsetMsgId", r.getOffsetMsgId(),
                            "broker", r.getMessageQueue().getBrokerName(), "queue", r.getMessageQueue().getQueueId(),
                            "offset", r.getQueueOffset(), "error", null, "code", null, "producer", instance);
                    } catch (Throwable e) {
                        long t1 = System.currentTimeMillis();
                        failed.incrementAndGet();
                        Integer code = e instanceof MQBrokerException ? (Integer) ((MQBrokerException) e).getResponseCode()
                            : e instanceof MQClientException ? (Integer) ((MQClientException) e).getResponseCode() : null;
                        String error = Jsonl.firstLine(e);
                        lastError.set(error);
                        line = Jsonl.obj("op", "send", "key", key, "digest", Jsonl.digest(body), "t0", t0, "t1", t1,
                            "status", "FAILED", "msgId", msg.getProperty("UNIQ_KEY"), "offsetMsgId", null,
                            "broker", null, "queue", null, "offset", null, "error", error, "code", code,
                            "producer", instance);
                    }
                    attempts.incrementAndGet();
                    history.write(line);
                }
            }, "chaos-send-" + w);
            t.start();
            workers.add(t);
        }

        Thread progress = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
                Jsonl.say(stderr, Jsonl.obj("event", "progress", "attempts", attempts.get(), "acked", acked.get(),
                    "notAcked", notAcked.get(), "failed", failed.get(), "lastError", lastError.get()));
            }
        }, "chaos-progress");
        progress.setDaemon(true);
        progress.start();

        for (Thread t : workers) {
            t.join();
        }
        history.write(Jsonl.obj("op", "meta", "role", "producer", "end", System.currentTimeMillis(),
            "attempts", attempts.get(), "acked", acked.get(), "notAcked", notAcked.get(), "failed", failed.get()));
        history.close();
        Jsonl.say(stderr, Jsonl.obj("event", "done", "attempts", attempts.get(), "acked", acked.get(),
            "notAcked", notAcked.get(), "failed", failed.get()));
        finished.countDown();
        producer.shutdown();
        System.exit(0);
    }

    static byte[] body(String key, int size) {
        byte[] head = (key + "|").getBytes(java.nio.charset.StandardCharsets.UTF_8);
        byte[] b = new byte[Math.max(size, head.length)];
        System.arraycopy(head, 0, b, 0, head.length);
        java.util.concurrent.ThreadLocalRandom r = java.util.concurrent.ThreadLocalRandom.current();
        for (int i = head.length; i < b.length; i++) {
            b[i] = (byte) ('a' + r.nextInt(26));
        }
        return b;
    }

    static String need(Map<String, String> a, String name) {
        String v = a.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    private ChaosProducer() {
    }
}
