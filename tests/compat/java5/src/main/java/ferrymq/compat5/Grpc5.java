package ferrymq.compat5;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The official RocketMQ 5.x Java client (rocketmq-client-java, gRPC) as a scriptable peer.
 * One JSON event per line on stdout:
 *
 * <pre>
 *   produce  endpoints=H:P topic=T count=N [kind=normal|fifo|delay] [groups=G] [delayMs=D] [prefix=P]
 *   simple   endpoints=H:P topic=T group=G expect=N [invisibleMs=I] [ack=true|false] [timeoutMs=X]
 *   push     endpoints=H:P topic=T group=G expect=N [timeoutMs=X]
 *   tx       endpoints=H:P topic=T [lingerMs=L]: transactional messages "commit", "rollback" (decided
 *            at once) and "check-commit", "check-rollback" (left open: the broker's check asks the
 *            TransactionChecker, which answers by the key); stays up lingerMs for the checks
 *   recall   endpoints=H:P topic=T handles=H1,H2: Producer.recallMessage of each recall handle, in order
 *   bench-produce / bench-simple: as produce / simple, printing only a final "done" with rates
 *   common: [ssl=false] [ak=.. sk=..] [awaitMs=5000]
 * </pre>
 */
public final class Grpc5 {
    private Grpc5() {
    }

    public static void main(String[] argv) throws Exception {
        String mode = argv[0];
        Map<String, String> a = options(argv, 1);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration cc = configuration(a);
        int code;
        switch (mode) {
            case "produce":
                code = produce(provider, cc, a, false);
                break;
            case "bench-produce":
                code = produce(provider, cc, a, true);
                break;
            case "simple":
                code = simple(provider, cc, a, false);
                break;
            case "bench-simple":
                code = simple(provider, cc, a, true);
                break;
            case "push":
                code = push(provider, cc, a);
                break;
            case "tx":
                code = transactions(provider, cc, a);
                break;
            case "recall":
                code = recall(provider, cc, a);
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.out.flush();
        System.exit(code);
    }

    /** {@code key=value} arguments from {@code argv[from]} on. */
    static Map<String, String> options(String[] argv, int from) {
        Map<String, String> a = new HashMap<>();
        for (int i = from; i < argv.length; i++) {
            int eq = argv[i].indexOf('=');
            a.put(argv[i].substring(0, eq), argv[i].substring(eq + 1));
        }
        return a;
    }

    /** The client's configuration from the common options (endpoints, ssl, ak/sk). */
    static ClientConfiguration configuration(Map<String, String> a) {
        ClientConfigurationBuilder cb = ClientConfiguration.newBuilder()
            .setEndpoints(a.get("endpoints"))
            .enableSsl(Boolean.parseBoolean(a.getOrDefault("ssl", "false")))
            .setRequestTimeout(Duration.ofSeconds(5));
        if (a.containsKey("ak")) {
            cb.setCredentialProvider(new StaticSessionCredentialsProvider(a.get("ak"), a.get("sk")));
        }
        return cb.build();
    }

    /** One JSON object of {@code key, value, ...}: numbers and booleans bare, the rest as strings. */
    static String json(Object... kv) {
        StringBuilder sb = new StringBuilder("{");
        for (int i = 0; i < kv.length; i += 2) {
            sb.append(i == 0 ? "\"" : ",\"").append(kv[i]).append("\":");
            Object v = kv[i + 1];
            if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else {
                sb.append('"').append(String.valueOf(v).replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
            }
        }
        return sb.append('}').toString();
    }

    private static void event(String name, Object... kv) {
        Object[] all = new Object[kv.length + 2];
        all[0] = "event";
        all[1] = name;
        System.arraycopy(kv, 0, all, 2, kv.length);
        String line = json(all);
        synchronized (System.out) {
            System.out.println(line);
        }
    }

    private static int produce(ClientServiceProvider provider, ClientConfiguration cc, Map<String, String> a,
                               boolean bench) throws Exception {
        if (bench) {
            return benchProduce(provider, cc, a);
        }
        String topic = a.get("topic");
        int count = Integer.parseInt(a.get("count"));
        String kind = a.getOrDefault("kind", "normal");
        int groups = Integer.parseInt(a.getOrDefault("groups", "3"));
        long delayMs = Long.parseLong(a.getOrDefault("delayMs", "0"));
        String prefix = a.getOrDefault("prefix", "k");
        int size = Integer.parseInt(a.getOrDefault("size", "0"));
        byte[] padding = new byte[size];
        Producer producer = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(topic).build();
        long t0 = System.nanoTime();
        int failed = 0;
        try {
            for (int i = 0; i < count; i++) {
                String key = prefix + i;
                MessageBuilder mb = provider.newMessageBuilder().setTopic(topic).setTag("TagA").setKeys(key)
                    .addProperty("seq", String.valueOf(i))
                    .setBody(size > 0 ? padding : ("body-" + key).getBytes(StandardCharsets.UTF_8));
                String group = "";
                long due = 0;
                if ("fifo".equals(kind)) {
                    group = "g" + (i % groups);
                    mb.setMessageGroup(group);
                } else if ("delay".equals(kind)) {
                    due = System.currentTimeMillis() + delayMs;
                    mb.setDeliveryTimestamp(due);
                }
                Message m = mb.build();
                try {
                    SendReceipt r = producer.send(m);
                    if (!bench) {
                        event("sent", "key", key, "id", r.getMessageId().toString(), "group", group,
                            "at", System.currentTimeMillis(), "due", due, "recallHandle", r.getRecallHandle());
                    }
                } catch (Exception e) {
                    failed++;
                    event("send_failed", "key", key, "error", e.toString());
                }
            }
        } finally {
            producer.close();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        event("done", "sent", count - failed, "failed", failed, "seconds", secs, "rate", (count - failed) / secs);
        return failed == 0 ? 0 : 1;
    }

    /** Recall timer messages by their handles: "recalled" (the id) or "recall_failed" (the exception). */
    private static int recall(ClientServiceProvider provider, ClientConfiguration cc, Map<String, String> a)
        throws Exception {
        String topic = a.get("topic");
        Producer producer = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(topic).build();
        try {
            for (String handle : a.get("handles").split(",")) {
                try {
                    event("recalled", "handle", handle, "id", producer.recallMessage(topic, handle).getMessageId());
                } catch (Exception e) {
                    event("recall_failed", "handle", handle, "error", e.toString());
                }
            }
        } finally {
            producer.close();
        }
        return 0;
    }

    /** N threads sharing one producer, each sending sync; only the final rate is printed. */
    private static int benchProduce(ClientServiceProvider provider, ClientConfiguration cc, Map<String, String> a)
        throws Exception {
        String topic = a.get("topic");
        int count = Integer.parseInt(a.get("count"));
        int threads = Integer.parseInt(a.getOrDefault("threads", "1"));
        byte[] body = new byte[Integer.parseInt(a.getOrDefault("size", "1024"))];
        int warmup = Integer.parseInt(a.getOrDefault("warmup", "1000"));
        Producer producer = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(topic).build();
        AtomicInteger failed = new AtomicInteger();
        AtomicInteger next = new AtomicInteger();
        for (int i = 0; i < warmup; i++) {
            producer.send(provider.newMessageBuilder().setTopic(topic).setBody(body).build());
        }
        long t0 = System.nanoTime();
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread w = new Thread(() -> {
                while (next.getAndIncrement() < count) {
                    try {
                        producer.send(provider.newMessageBuilder().setTopic(topic).setBody(body).build());
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                }
            });
            w.start();
            workers.add(w);
        }
        for (Thread w : workers) {
            w.join();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        producer.close();
        event("done", "sent", count - failed.get(), "failed", failed.get(), "seconds", secs,
            "rate", (count - failed.get()) / secs, "warmup", warmup);
        return failed.get() == 0 ? 0 : 1;
    }

    private static int transactions(ClientServiceProvider provider, ClientConfiguration cc, Map<String, String> a)
        throws Exception {
        String topic = a.get("topic");
        Map<String, Boolean> checked = new ConcurrentHashMap<>();
        Producer producer = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(topic)
            .setTransactionChecker(mv -> {
                String key = String.join(",", mv.getKeys());
                TransactionResolution r = key.startsWith("check-commit") ? TransactionResolution.COMMIT
                    : key.startsWith("check-rollback") ? TransactionResolution.ROLLBACK : TransactionResolution.UNKNOWN;
                checked.put(key, true);
                event("checked", "key", key, "id", mv.getMessageId().toString(), "resolution", r.name());
                return r;
            }).build();
        try {
            for (String key : new String[] {"commit", "rollback", "check-commit", "check-rollback"}) {
                Transaction tx = producer.beginTransaction();
                SendReceipt r = producer.send(provider.newMessageBuilder().setTopic(topic).setKeys(key)
                    .setBody(("body-" + key).getBytes(StandardCharsets.UTF_8)).build(), tx);
                event("sent", "key", key, "id", r.getMessageId().toString());
                if ("commit".equals(key)) {
                    tx.commit();
                } else if ("rollback".equals(key)) {
                    tx.rollback();
                }
            }
            long deadline = System.currentTimeMillis() + Long.parseLong(a.getOrDefault("lingerMs", "30000"));
            while (checked.size() < 2 && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
        } finally {
            producer.close();
        }
        event("done", "checked", checked.size());
        return checked.size() >= 2 ? 0 : 1;
    }

    private static Map<String, FilterExpression> subscription(Map<String, String> a) {
        return Collections.singletonMap(a.get("topic"),
            new FilterExpression(a.getOrDefault("tags", "*"), FilterExpressionType.TAG));
    }

    private static String text(MessageView mv) {
        ByteBuffer b = mv.getBody();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    private static void received(MessageView mv, String via) {
        event("received", "via", via, "key", String.join(",", mv.getKeys()), "id", mv.getMessageId().toString(),
            "attempt", mv.getDeliveryAttempt(), "group", mv.getMessageGroup().orElse(""),
            "tag", mv.getTag().orElse(""), "seq", mv.getProperties().getOrDefault("seq", ""),
            "body", text(mv), "at", System.currentTimeMillis());
    }

    private static int simple(ClientServiceProvider provider, ClientConfiguration cc, Map<String, String> a,
                              boolean bench) throws Exception {
        int expect = Integer.parseInt(a.get("expect"));
        long invisibleMs = Long.parseLong(a.getOrDefault("invisibleMs", "15000"));
        boolean ack = Boolean.parseBoolean(a.getOrDefault("ack", "true"));
        long deadline = System.currentTimeMillis() + Long.parseLong(a.getOrDefault("timeoutMs", "60000"));
        int batch = Integer.parseInt(a.getOrDefault("batch", "16"));
        SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(cc)
            .setConsumerGroup(a.get("group"))
            .setAwaitDuration(Duration.ofMillis(Long.parseLong(a.getOrDefault("awaitMs", "5000"))))
            .setSubscriptionExpressions(subscription(a)).build();
        int got = 0;
        long t0 = System.nanoTime();
        try {
            while (got < expect && System.currentTimeMillis() < deadline) {
                List<MessageView> views;
                try {
                    views = consumer.receive(batch, Duration.ofMillis(invisibleMs));
                } catch (Exception e) {
                    event("receive_failed", "error", e.toString());
                    Thread.sleep(200);
                    continue;
                }
                List<java.util.concurrent.CompletableFuture<Void>> acks = new ArrayList<>();
                for (MessageView mv : views) {
                    got++;
                    if (!bench) {
                        received(mv, "simple");
                    }
                    if (ack && bench) {
                        acks.add(consumer.ackAsync(mv));
                    } else if (ack) {
                        consumer.ack(mv);
                    }
                }
                for (java.util.concurrent.CompletableFuture<Void> f : acks) {
                    f.join();
                }
            }
        } finally {
            consumer.close();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        event("done", "received", got, "seconds", secs, "rate", got / secs);
        return got >= expect ? 0 : 1;
    }

    private static int push(ClientServiceProvider provider, ClientConfiguration cc, Map<String, String> a)
        throws Exception {
        int expect = Integer.parseInt(a.get("expect"));
        long deadline = System.currentTimeMillis() + Long.parseLong(a.getOrDefault("timeoutMs", "60000"));
        Map<String, Boolean> seen = new ConcurrentHashMap<>();
        AtomicInteger deliveries = new AtomicInteger();
        PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(cc)
            .setConsumerGroup(a.get("group")).setSubscriptionExpressions(subscription(a))
            .setMessageListener(mv -> {
                deliveries.incrementAndGet();
                received(mv, "push");
                seen.put(mv.getMessageId().toString(), true);
                return ConsumeResult.SUCCESS;
            }).build();
        try {
            while (seen.size() < expect && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            // a little longer: acked messages must not come back
            Thread.sleep(Long.parseLong(a.getOrDefault("lingerMs", "0")));
        } finally {
            consumer.close();
        }
        event("done", "received", seen.size(), "deliveries", deliveries.get());
        return seen.size() >= expect ? 0 : 1;
    }
}
