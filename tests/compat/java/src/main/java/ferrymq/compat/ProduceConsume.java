package ferrymq.compat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The official RocketMQ 4.x Java client as a scriptable peer for FerryMQ's compatibility tests.
 *
 * <pre>
 * java ferrymq.compat.ProduceConsume ACTION --namesrv HOST:PORT --topic T [options]
 *   ACTION   produce-consume (default) | produce | consume
 *   --group G            consumer group (and producer group with suffix "_P"); default: random
 *   --count N            messages per send mode (default 20)
 *   --modes sync,async,oneway,batch   send modes, in this order (default the first three;
 *                        batch sends the count messages as one SEND_BATCH_MESSAGE)
 *   --tag TAG            tag of every sent message (default TagA)
 *   --key-prefix P       keys are P-MODE-I (default: random run id)
 *   --subscribe EXPR     consumer subscription expression (default *)
 *   (without --namesrv the client finds name servers itself, e.g. -Drocketmq.namesrv.domain)
 *   --sql EXPR           subscribe with MessageSelector.bySql(EXPR) instead (messages carry the
 *                        user properties ferry_mode and ferry_seq)
 *   --expect-keys K1,K2  consume: keys that must arrive (produce-consume: the keys sent);
 *                        "@FILE" reads them from FILE, one a line
 *   --expect-count N     consume: number of distinct keys that must arrive
 *   --timeout-ms MS      overall deadline for sending and for consuming (default 30000)
 *   --settle-ms MS       keep consuming this long after the last expected key (default 0)
 *   --access-key AK --secret-key SK   sign every request (rocketmq-acl's AclClientRPCHook)
 *   --trace true         enableMsgTrace on the producer and the consumer
 *   --trace-topic T      their customizedTraceTopic (implies --trace true)
 *   --hold true          once the keys arrived, print {"event":"consumed"} and keep the producer
 *                        and the consumer up (their trace records are sent in the background,
 *                        and lost if shutdown comes first) until stdin ends
 * </pre>
 *
 * <p>stdout carries only JSON lines, one object per line, each with an "event" field:
 * sent, send_failed, received, error, done. Exit code 0 = every expected key arrived and every
 * acknowledged send succeeded; 2 = timeout or failed sends; 1 = usage or client error.
 */
public final class ProduceConsume {

    private static final Object OUT_LOCK = new Object();

    public static void main(String[] argv) {
        int rc;
        try {
            rc = run(Args.parse(argv));
        } catch (IllegalArgumentException e) {
            emit(obj("event", "error", "error", "usage: " + e.getMessage()));
            rc = 1;
        } catch (Throwable t) {
            t.printStackTrace();
            emit(obj("event", "error", "error", String.valueOf(t)));
            rc = 1;
        }
        System.out.flush();
        // The client leaves non-daemon threads behind on some error paths; do not hang.
        Runtime.getRuntime().halt(rc);
    }

    private static int run(Args a) throws Exception {
        long t0 = System.currentTimeMillis();
        long deadline = t0 + a.timeoutMs;
        Map<String, Object> done = obj("event", "done", "action", a.action, "topic", a.topic, "group", a.group);
        // keys the consumer must see: --expect-keys plus every send that did not fail
        Set<String> expected = Collections.synchronizedSet(new LinkedHashSet<>(a.expectKeys));
        boolean ok = true;

        DefaultMQProducer producer = null;
        try {
            if (!a.action.equals("consume")) {
                Map<String, Integer> sentCounts = new LinkedHashMap<>();
                producer = startProducer(a);
                int failures = produce(producer, a, deadline, sentCounts, expected);
                if (!a.hold) {
                    producer.shutdown();
                    producer = null;
                }
                done.put("sent", sentCounts);
                done.put("sendFailures", failures);
                ok = failures == 0;
            }
            if (!a.action.equals("produce")) {
                ok &= consume(a, deadline, expected, done);
            }
        } finally {
            if (producer != null) { // held with --hold: its trace records may still be on their way
                producer.shutdown();
            }
        }
        done.put("ok", ok);
        done.put("elapsedMs", System.currentTimeMillis() - t0);
        emit(done);
        return ok ? 0 : 2;
    }

    // ------------------------------------------------------------------ producing

    private static DefaultMQProducer startProducer(Args a) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(a.group + "_P", a.rpcHook(), a.trace, a.traceTopic);
        producer.setNamesrvAddr(a.namesrv);
        producer.setInstanceName(a.instance + "-P");
        producer.setSendMsgTimeout(10000);
        producer.setPollNameServerInterval(1000);
        producer.start();
        return producer;
    }

    /** Sends, in order, {@code count} messages per mode; returns the number of failed sends. */
    private static int produce(DefaultMQProducer producer, Args a, long deadline, Map<String, Integer> sentCounts,
                               Set<String> expected) throws Exception {
        int failures = 0;
        for (String mode : a.modes) {
            AtomicInteger acked = new AtomicInteger();
            List<Map<String, Object>> failed = Collections.synchronizedList(new ArrayList<>());
            CountDownLatch callbacks = new CountDownLatch(mode.equals("async") ? a.count : 0);
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < a.count; i++) {
                String key = a.keyPrefix + "-" + mode + "-" + i;
                Message msg = new Message(a.topic, a.tag, key,
                    ("ferrymq compat " + mode + " #" + i).getBytes(StandardCharsets.UTF_8));
                msg.putUserProperty("ferry_mode", mode);
                msg.putUserProperty("ferry_seq", Integer.toString(i));
                try {
                    switch (mode) {
                        case "sync":
                            SendResult r = producer.send(msg);
                            emit(sent(mode, key, r));
                            break;
                        case "async":
                            producer.send(msg, new SendCallback() {
                                @Override
                                public void onSuccess(SendResult r) {
                                    emit(sent("async", key, r));
                                    expected.add(key);
                                    acked.incrementAndGet();
                                    callbacks.countDown();
                                }

                                @Override
                                public void onException(Throwable e) {
                                    failed.add(sendFailed(mode, key, e));
                                    callbacks.countDown();
                                }
                            });
                            continue; // counted by the callback
                        case "batch":
                            batch.add(msg);
                            if (batch.size() < a.count) {
                                continue;
                            }
                            SendResult br = producer.send(batch);
                            for (Message m : batch) {
                                emit(sent(mode, m.getKeys(), br));
                                expected.add(m.getKeys());
                            }
                            acked.addAndGet(batch.size());
                            continue;
                        case "oneway":
                            producer.sendOneway(msg);
                            // No acknowledgement exists: report the client-side unique id only.
                            emit(obj("event", "sent", "mode", mode, "key", key,
                                "msgId", MessageClientIDSetter.getUniqID(msg), "offsetMsgId", null,
                                "queueId", null, "queueOffset", null, "sendStatus", null));
                            break;
                        default:
                            throw new IllegalArgumentException("unknown send mode " + mode);
                    }
                    expected.add(key);
                    acked.incrementAndGet();
                } catch (IllegalArgumentException e) {
                    throw e;
                } catch (Exception e) {
                    failed.add(sendFailed(mode, key, e));
                    if (mode.equals("async")) {
                        callbacks.countDown();
                    }
                }
            }
            if (!callbacks.await(Math.max(0, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS)) {
                failed.add(obj("event", "send_failed", "mode", mode, "key", null,
                    "error", "timeout waiting for " + callbacks.getCount() + " async callbacks"));
            }
            synchronized (failed) {
                failed.forEach(ProduceConsume::emit);
                failures += failed.size();
            }
            sentCounts.put(mode, acked.get());
        }
        return failures;
    }

    private static Map<String, Object> sendFailed(String mode, String key, Throwable e) {
        StringBuilder error = new StringBuilder(e.toString());
        for (Throwable cause = e.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
            error.append(" | caused by ").append(cause);  // the broker's answer hides in the chain
        }
        return obj("event", "send_failed", "mode", mode, "key", key, "error", error.toString());
    }

    private static Map<String, Object> sent(String mode, String key, SendResult r) {
        return obj("event", "sent", "mode", mode, "key", key,
            "msgId", r.getMsgId(), "offsetMsgId", r.getOffsetMsgId(),
            "queueId", r.getMessageQueue().getQueueId(), "queueOffset", r.getQueueOffset(),
            "brokerName", r.getMessageQueue().getBrokerName(),
            "sendStatus", String.valueOf(r.getSendStatus()));
    }

    // ------------------------------------------------------------------ consuming

    /**
     * Push-consumes until every expected key arrived (or, with none expected, {@code expectCount}
     * distinct keys did; with neither, until the deadline). Returns whether that happened in time.
     */
    private static boolean consume(Args a, long deadline, Set<String> expected, Map<String, Object> done)
        throws Exception {
        Set<String> wanted = new LinkedHashSet<>(expected);
        Set<String> pending = Collections.synchronizedSet(new LinkedHashSet<>(wanted));
        Set<String> seen = Collections.synchronizedSet(new LinkedHashSet<>());
        AtomicInteger deliveries = new AtomicInteger();
        AtomicInteger unexpected = new AtomicInteger();
        int expectCount = wanted.isEmpty() ? a.expectCount : wanted.size();
        CountDownLatch complete = new CountDownLatch(1);

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(a.group, a.rpcHook(),
            new AllocateMessageQueueAveragely(), a.trace, a.traceTopic);
        consumer.setNamesrvAddr(a.namesrv);
        consumer.setInstanceName(a.instance + "-C");
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        if (a.trace) {
            // shutdown waits for running listeners, so their SubAfter trace records are sent
            consumer.setAwaitTerminationMillisWhenShutdown(10000);
        }
        if (a.sql != null) {
            consumer.subscribe(a.topic, MessageSelector.bySql(a.sql));
        } else {
            consumer.subscribe(a.topic, a.subscribe);
        }
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                emit(received(m));
                String key = m.getKeys();
                deliveries.incrementAndGet();
                if (!wanted.isEmpty() && !wanted.contains(key)) {
                    unexpected.incrementAndGet();
                }
                pending.remove(key);
                seen.add(key);
                boolean finished = wanted.isEmpty() ? seen.size() >= expectCount : pending.isEmpty();
                if (finished && expectCount > 0) {
                    complete.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean ok;
        try {
            boolean arrived = complete.await(Math.max(0, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            ok = arrived || expectCount <= 0; // nothing expected: just observe the topic until the deadline
            if (arrived && a.settleMs > 0) {
                Thread.sleep(a.settleMs);
            }
            if (a.hold) {
                emit(obj("event", "consumed", "ok", ok));
                holdUntilStdinEnds();
            }
        } finally {
            consumer.shutdown();
        }
        done.put("received", deliveries.get());
        done.put("unexpected", unexpected.get());
        done.put("distinctKeys", seen.size());
        synchronized (pending) {
            done.put("missing", new ArrayList<>(pending));
        }
        return ok;
    }

    /** Returns when stdin ends: the caller's signal (a closed pipe, or /dev/null at once). */
    private static void holdUntilStdinEnds() throws IOException {
        while (System.in.read() >= 0) {
            continue;
        }
    }

    private static Map<String, Object> received(MessageExt m) {
        return obj("event", "received", "topic", m.getTopic(), "key", m.getKeys(), "tags", m.getTags(),
            "body", new String(m.getBody(), StandardCharsets.UTF_8),
            "props", new TreeMap<>(m.getProperties()),
            "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(),
            "msgId", m.getMsgId(),
            "offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId(),
            "commitLogOffset", m.getCommitLogOffset(), "reconsumeTimes", m.getReconsumeTimes(),
            "bornTimestamp", m.getBornTimestamp(), "storeTimestamp", m.getStoreTimestamp(),
            "bornHost", String.valueOf(m.getBornHost()), "storeHost", String.valueOf(m.getStoreHost()),
            "sysFlag", m.getSysFlag(), "bodyCRC", m.getBodyCRC(), "storeSize", m.getStoreSize());
    }

    // ------------------------------------------------------------------ arguments

    private static final class Args {
        String action = "produce-consume";
        String namesrv;
        String topic;
        String group;
        int count = 20;
        List<String> modes = Arrays.asList("sync", "async", "oneway");
        String tag = "TagA";
        String keyPrefix;
        String subscribe = "*";
        List<String> expectKeys = new ArrayList<>();
        int expectCount = 0;
        long timeoutMs = 30000;
        long settleMs = 0;
        String instance;
        String accessKey;
        String secretKey;
        String sql;
        boolean trace;
        String traceTopic;
        boolean hold;

        RPCHook rpcHook() {
            return accessKey == null ? null : new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
        }

        static Args parse(String[] argv) {
            Args a = new Args();
            String run = Long.toString(ProcessHandle.current().pid()) + "_" + Long.toHexString(System.nanoTime());
            int i = 0;
            if (argv.length > 0 && !argv[0].startsWith("--")) {
                a.action = argv[i++];
            }
            if (!Arrays.asList("produce-consume", "produce", "consume").contains(a.action)) {
                throw new IllegalArgumentException("unknown action " + a.action);
            }
            Map<String, String> opts = new HashMap<>();
            for (; i < argv.length; i++) {
                String arg = argv[i];
                if (!arg.startsWith("--")) {
                    throw new IllegalArgumentException("unexpected argument " + arg);
                }
                int eq = arg.indexOf('=');
                if (eq > 0) {
                    opts.put(arg.substring(2, eq), arg.substring(eq + 1));
                } else if (i + 1 < argv.length) {
                    opts.put(arg.substring(2), argv[++i]);
                } else {
                    throw new IllegalArgumentException("missing value for " + arg);
                }
            }
            // none: the client's own lookup (rocketmq.namesrv.addr, NAMESRV_ADDR, the address service)
            a.namesrv = opts.remove("namesrv");
            a.topic = require(opts, "topic");
            a.group = opts.getOrDefault("group", "ferry_compat_" + run);
            a.keyPrefix = opts.getOrDefault("key-prefix", "k" + run);
            a.instance = "ferry-compat-" + run;
            if (opts.containsKey("count")) a.count = Integer.parseInt(opts.remove("count"));
            if (opts.containsKey("modes")) a.modes = split(opts.remove("modes"));
            if (opts.containsKey("tag")) a.tag = opts.remove("tag");
            if (opts.containsKey("subscribe")) a.subscribe = opts.remove("subscribe");
            if (opts.containsKey("expect-keys")) a.expectKeys = split(opts.remove("expect-keys"));
            if (opts.containsKey("expect-count")) a.expectCount = Integer.parseInt(opts.remove("expect-count"));
            if (opts.containsKey("timeout-ms")) a.timeoutMs = Long.parseLong(opts.remove("timeout-ms"));
            if (opts.containsKey("settle-ms")) a.settleMs = Long.parseLong(opts.remove("settle-ms"));
            a.sql = opts.remove("sql");
            a.traceTopic = opts.remove("trace-topic");
            a.trace = Boolean.parseBoolean(opts.remove("trace")) || a.traceTopic != null;
            a.hold = Boolean.parseBoolean(opts.remove("hold"));
            a.accessKey = opts.remove("access-key");
            a.secretKey = opts.remove("secret-key");
            if ((a.accessKey == null) != (a.secretKey == null)) {
                throw new IllegalArgumentException("--access-key and --secret-key go together");
            }
            opts.remove("group");
            opts.remove("key-prefix");
            if (!opts.isEmpty()) {
                throw new IllegalArgumentException("unknown options " + opts.keySet());
            }
            return a;
        }

        private static String require(Map<String, String> opts, String name) {
            String v = opts.remove(name);
            if (v == null || v.isEmpty()) {
                throw new IllegalArgumentException("--" + name + " is required");
            }
            return v;
        }

        /** "a,b,c", or "@FILE" for one item a line (long key lists exceed argv limits). */
        private static List<String> split(String csv) {
            if (csv.startsWith("@")) {
                try {
                    csv = String.join(",", Files.readAllLines(Paths.get(csv.substring(1)), StandardCharsets.UTF_8));
                } catch (IOException e) {
                    throw new IllegalArgumentException("cannot read " + csv + ": " + e);
                }
            }
            List<String> out = new ArrayList<>();
            for (String s : csv.split(",")) {
                if (!s.trim().isEmpty()) out.add(s.trim());
            }
            return out;
        }
    }

    // ------------------------------------------------------------------ JSON lines

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    static void emit(Map<String, Object> event) {
        StringBuilder sb = new StringBuilder(256);
        json(sb, event);
        synchronized (OUT_LOCK) {
            System.out.println(sb);
            System.out.flush();
        }
    }

    private static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Iterable) {
            sb.append('[');
            boolean first = true;
            for (Object o : (Iterable<?>) v) {
                if (!first) sb.append(',');
                first = false;
                json(sb, o);
            }
            sb.append(']');
        } else {
            String s = v.toString();
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }

    private ProduceConsume() {
    }
}
