package ferrymq.compat53;

import static ferrymq.compat53.Program.bytes;
import static ferrymq.compat53.Program.emit;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RECALL_MESSAGE through the Apache RocketMQ 5.3.2 remoting client's
 * {@code DefaultMQProducer.recallMessage} (5.3.2 only: compiled with the 5.3.2 toolchain).
 *
 * <pre>
 * java ferrymq.compat53.Recall --namesrv HOST:PORT --topic T --other T2 --group G
 *      [--delay-ms 3000] [--timeout-ms 60000]
 * </pre>
 *
 * <p>Two timers due together on queue 0 ("recall me", "keep me"); recalls of the first with the
 * topic T2, with a garbage handle, then with T (the real recall); queue 0 pulled from offset 0
 * until "keep me" arrives; then a recall of the fired second. Events: sent (body, msgId,
 * recallHandle), recall (case, msgId, or code and remark for a broker's refusal, or error for
 * the client's), received (body), done. Exit code 0, or 1 on a client error.
 */
public final class Recall {

    public static void main(String[] argv) {
        Map<String, String> defaults = new LinkedHashMap<>();
        defaults.put("--delay-ms", "3000");
        defaults.put("--timeout-ms", "60000");
        Program.main(argv, defaults, Recall::run);
    }

    private static int run(Map<String, String> a) throws Exception {
        String namesrv = a.get("--namesrv");
        String topic = a.get("--topic");
        String other = a.get("--other");
        String group = a.getOrDefault("--group", "GRecall" + UUID.randomUUID().toString().substring(0, 8));
        long deadline = System.currentTimeMillis() + Long.parseLong(a.get("--timeout-ms"));
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.start();
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        try {
            SendResult created = Program.sendOnceRouted(producer, new Message(topic, bytes("create the topic")), deadline);
            Program.sendOnceRouted(producer, new Message(other, bytes("create the topic")), deadline);
            MessageQueue mq = new MessageQueue(topic, created.getMessageQueue().getBrokerName(), 0);
            long due = System.currentTimeMillis() + Long.parseLong(a.get("--delay-ms"));
            String[] handles = new String[2];
            String[] bodies = {"recall me", "keep me"};
            for (int i = 0; i < 2; i++) {
                Message m = new Message(topic, bytes(bodies[i]));
                m.setDeliverTimeMs(due);
                SendResult r = producer.send(m, mq);
                handles[i] = r.getRecallHandle();
                emit("event", "sent", "body", bodies[i], "msgId", r.getMsgId(), "recallHandle", r.getRecallHandle());
            }
            recall(producer, "other-topic", other, handles[0]);
            recall(producer, "garbage", topic, "not base64 !");
            recall(producer, "recalled", topic, handles[0]);

            consumer.start();
            consumer.assign(List.of(mq));
            consumer.seek(mq, 0);
            boolean kept = false;
            while (!kept && System.currentTimeMillis() < deadline) {
                for (MessageExt m : consumer.poll(500)) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    if (!body.equals("create the topic")) {
                        emit("event", "received", "body", body);
                        kept |= body.equals("keep me");
                    }
                }
            }
            recall(producer, "fired", topic, handles[1]);
            emit("event", "done", "kept", kept);
            return 0;
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
    }

    private static void recall(DefaultMQProducer producer, String name, String topic, String handle) throws Exception {
        try {
            emit("event", "recall", "case", name, "msgId", producer.recallMessage(topic, handle));
        } catch (MQBrokerException e) {
            emit("event", "recall", "case", name, "code", e.getResponseCode(), "remark", e.getErrorMessage());
        } catch (MQClientException e) {
            emit("event", "recall", "case", name, "error", e.getErrorMessage());
        }
    }
}
