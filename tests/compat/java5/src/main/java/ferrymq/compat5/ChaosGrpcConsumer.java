package ferrymq.compat5;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

/**
 * The fault-injection suite's gRPC consumer (docs/chaos.md): the official RocketMQ 5.x Java
 * client's PushConsumer, writing one JSON line per message its listener is handed, on stdout, in
 * the history format of e2e/chaos/history.py (the lines ferrymq.chaos.ChaosConsumer writes for
 * the 4.9.7 client). Progress goes to stderr.
 *
 * <pre>
 * java ferrymq.compat5.ChaosGrpcConsumer endpoints=H:P topic=T group=G [instance=NAME] [threads=1]
 * </pre>
 *
 * <p>History lines: {"op":"recv","key","digest","broker","queue","offset","t","consumer","session",
 * "reconsume","msgId","handle"}. A 5.x message view carries the broker name of the queue it was
 * received from, the queue offset, the delivery attempt and the receipt handle, but not the queue
 * id: FerryMQ assigns a normal group each broker as a whole (queue id -1: receive from any of its
 * queues), which is what "queue" holds. The queue the message sits in is named by the receipt
 * handle ("handle"), which e2e/chaos/workload.py (grpc_reads) decodes with the broker's own codec.
 * "session" is always "pop": the broker keeps the group's offsets and hands out any queue's
 * messages, so no reading of a queue by this client has an order of its own to check.
 * "reconsume" is the delivery attempt less one.
 *
 * <p>It runs until SIGTERM, then closes the consumer and writes {"op":"meta","end",...}.
 */
public final class ChaosGrpcConsumer {
    private ChaosGrpcConsumer() {
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Grpc5.options(argv, 0);
        String topic = a.get("topic");
        String group = a.get("group");
        String instance = a.getOrDefault("instance", "grpc-consumer-" + ProcessHandle.current().pid());
        history("op", "meta", "role", "consumer", "instance", instance, "topic", topic, "group", group,
            "start", System.currentTimeMillis());

        AtomicLong received = new AtomicLong();
        PushConsumer consumer = ClientServiceProvider.loadService().newPushConsumerBuilder()
            .setClientConfiguration(Grpc5.configuration(a))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setConsumptionThreadCount(Integer.parseInt(a.getOrDefault("threads", "1")))
            .setMessageListener(view -> {
                recv(view, instance);
                received.incrementAndGet();
                return ConsumeResult.SUCCESS;
            }).build();
        progress("event", "ready", "instance", instance);

        CountDownLatch stop = new CountDownLatch(1);
        CountDownLatch finished = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.countDown();
            try {
                // close() waits for the receive requests in flight: long polls of up to 30 s
                finished.await(45, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // exiting anyway
            }
        }, "chaos-grpc-consumer-stop"));
        long shown = -1;
        while (!stop.await(1, TimeUnit.SECONDS)) {
            if (received.get() != shown) {
                shown = received.get();
                progress("event", "progress", "received", shown);
            }
        }
        consumer.close();
        history("op", "meta", "role", "consumer", "end", System.currentTimeMillis(), "received", received.get(),
            "stopped", "signal");
        finished.countDown();
    }

    private static void recv(MessageView view, String instance) {
        // The listener is handed the client's own view: the queue and the receipt are on it.
        MessageViewImpl impl = (MessageViewImpl) view;
        history("op", "recv", "key", String.join(",", view.getKeys()), "digest", digest(view.getBody()),
            "broker", impl.getMessageQueue().getBroker().getName(), "queue", impl.getMessageQueue().getQueueId(),
            "offset", impl.getOffset(), "t", System.currentTimeMillis(), "consumer", instance, "session", "pop",
            "reconsume", view.getDeliveryAttempt() - 1, "msgId", view.getMessageId().toString(),
            "handle", impl.getReceiptHandle());
    }

    /** The first 16 hex digits of the body's SHA-256, as the producer computed over what it sent. */
    private static String digest(ByteBuffer body) {
        try {
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            sha.update(body);
            return HexFormat.of().formatHex(Arrays.copyOf(sha.digest(), 8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A history line on stdout, flushed at once: a killed JVM leaves at most its last line cut. */
    private static void history(Object... kv) {
        String line = Grpc5.json(kv);
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static void progress(Object... kv) {
        System.err.println(Grpc5.json(kv));
        System.err.flush();
    }
}
