package ferrymq.compat53;

import static ferrymq.compat53.Program.emit;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Message trace through the Apache RocketMQ 5.3.1 remoting client: a producer and a push
 * consumer with {@code enableMsgTrace}, one message sent and consumed; the clients write their
 * Pub / SubBefore / SubAfter records to the trace topic.
 *
 * <pre>
 * java ferrymq.compat53.Trace --namesrv HOST:PORT --topic T --group G --key K
 *      [--trace-topic T]   the clients' customizedTraceTopic (default: RMQ_SYS_TRACE_TOPIC)
 *      [--timeout-ms MS]   deadline for the whole run (default 60000)
 * </pre>
 *
 * <p>stdout carries only JSON lines in the format of ferrymq.compat.ProduceConsume: sent (key,
 * msgId, offsetMsgId), received (key, msgId), consumed (ok), done (ok). After consumed both
 * clients stay up, sending their trace records, until stdin ends.
 * Exit code 0 = the message arrived; 2 = it did not; 1 = error.
 */
public final class Trace {

    public static void main(String[] argv) {
        Program.main(argv, Map.of("--timeout-ms", "60000"), Trace::run);
    }

    private static int run(Map<String, String> a) throws Exception {
        String namesrv = a.get("--namesrv");
        String topic = a.get("--topic");
        String group = a.getOrDefault("--group", "GTrace" + UUID.randomUUID().toString().substring(0, 8));
        String key = a.getOrDefault("--key", "trace-" + UUID.randomUUID().toString().substring(0, 8));
        String traceTopic = a.get("--trace-topic");
        long deadline = System.currentTimeMillis() + Long.parseLong(a.get("--timeout-ms"));

        DefaultMQProducer producer = new DefaultMQProducer(group + "_P", true, traceTopic);
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(10000);
        producer.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, true, traceTopic);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // shutdown waits for the running listener, so its SubAfter record is sent
        consumer.setAwaitTerminationMillisWhenShutdown(10000);
        consumer.subscribe(topic, "*");
        CountDownLatch arrived = new CountDownLatch(1);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit("event", "received", "topic", m.getTopic(), "key", m.getKeys(), "msgId", m.getMsgId(),
                    "tags", m.getTags());
                if (key.equals(m.getKeys())) {
                    arrived.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        boolean ok;
        try {
            SendResult r = Program.sendOnceRouted(producer, new Message(topic, "TagTrace", key,
                "traced".getBytes(StandardCharsets.UTF_8)), deadline);
            emit("event", "sent", "key", key, "msgId", r.getMsgId(), "offsetMsgId", r.getOffsetMsgId(),
                "sendStatus", String.valueOf(r.getSendStatus()));
            consumer.start();
            ok = arrived.await(Math.max(0, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            emit("event", "consumed", "ok", ok);
            // 5.3.1's trace dispatchers send in the background and give up on what is still
            // unsent 500 ms into shutdown: the clients stay up until stdin ends (the caller
            // closes it once the records are stored; /dev/null ends it at once)
            Program.holdUntilStdinEnds();
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
        emit("event", "done", "topic", topic, "group", group, "ok", ok);
        return ok ? 0 : 2;
    }
}
