package ferrymq.compat53;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONWriter;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Timer messages through the Apache RocketMQ 5.3.1 remoting client (rocketmq-client), the
 * setters 4.x does not have: {@code setDelayTimeSec}, {@code setDelayTimeMs},
 * {@code setDeliverTimeMs}.
 *
 * <pre>
 * java ferrymq.compat53.Timers --namesrv HOST:PORT --topic T --group G
 *      [--timers sec:6,ms:6500,deliver:7700]   setter:delay (delay in s for sec, else in ms;
 *                                               deliver sends now + delay as the epoch time)
 *      [--refuse-sec N]   also send one message with setDelayTimeSec(N) that must be refused
 *      [--timeout-ms MS]  deadline for the whole run (default 60000)
 * </pre>
 *
 * <p>First a plain message, consumed by a push consumer (so the consumer is in place), then the
 * refused one, then the timers. stdout carries only JSON lines with an "event" field, in the
 * format of ferrymq.compat.ProduceConsume: sent (setter, key, sentAtMs, ackedAtMs, dueFromMs,
 * dueToMs: the window the broker's due time lies in), send_failed (key, code, remark),
 * received (key, receivedAtMs, ...), done. Exit code 0 = every timer arrived; 2 = not all did
 * or a send went otherwise than expected; 1 = client error.
 */
public final class Timers {

    private static final Object OUT_LOCK = new Object();

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        a.put("--timers", "sec:6,ms:6500,deliver:7700");
        a.put("--timeout-ms", "60000");
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i], argv[i + 1]);
        }
        int rc;
        try {
            rc = run(a);
        } catch (Throwable t) {
            emit("event", "error", "error", String.valueOf(t));
            rc = 1;
        }
        System.exit(rc);
    }

    private static int run(Map<String, String> a) throws Exception {
        String namesrv = a.get("--namesrv");
        String topic = a.get("--topic");
        String group = a.getOrDefault("--group", "GTimers" + UUID.randomUUID().toString().substring(0, 8));
        long deadline = System.currentTimeMillis() + Long.parseLong(a.get("--timeout-ms"));
        String run = UUID.randomUUID().toString().substring(0, 8);

        Set<String> pending = new LinkedHashSet<>();
        CountDownLatch ready = new CountDownLatch(1);
        String readyKey = "ready-" + run;

        DefaultMQProducer producer = new DefaultMQProducer(group + "_P");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(10000);
        producer.start();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                emit("event", "received", "topic", m.getTopic(), "key", m.getKeys(),
                    "body", new String(m.getBody(), StandardCharsets.UTF_8), "msgId", m.getMsgId(),
                    "receivedAtMs", now, "bornTimestamp", m.getBornTimestamp(),
                    "storeTimestamp", m.getStoreTimestamp(), "queueId", m.getQueueId(),
                    "reconsumeTimes", m.getReconsumeTimes());
                if (readyKey.equals(m.getKeys())) {
                    ready.countDown();
                }
                synchronized (pending) {
                    pending.remove(m.getKeys());
                    pending.notifyAll();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        boolean ok = true;
        try {
            // a plain message first: the topic exists and the consumer holds its queues
            send(producer, new Message(topic, "ready", readyKey, bytes(readyKey)), "plain", 0, deadline);
            consumer.start();
            if (!ready.await(Math.max(0, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS)) {
                emit("event", "error", "error", "the plain message did not arrive");
                return 2;
            }
            if (a.containsKey("--refuse-sec")) {
                long sec = Long.parseLong(a.get("--refuse-sec"));
                Message m = new Message(topic, "timer", "refused-" + run, bytes("refused"));
                m.setDelayTimeSec(sec);
                try {
                    SendResult r = producer.send(m);
                    emit("event", "sent", "setter", "sec", "key", m.getKeys(), "delay", sec,
                        "sendStatus", String.valueOf(r.getSendStatus()), "msgId", r.getMsgId());
                    ok = false;
                } catch (MQBrokerException e) {
                    emit("event", "send_failed", "setter", "sec", "key", m.getKeys(), "delay", sec,
                        "code", e.getResponseCode(), "remark", e.getErrorMessage());
                }
            }
            for (String spec : a.get("--timers").split(",")) {
                String setter = spec.split(":")[0];
                long delay = Long.parseLong(spec.split(":")[1]);
                String key = "timer-" + setter + "-" + run;
                Message m = new Message(topic, "timer", key, bytes(spec));
                synchronized (pending) {
                    pending.add(key);
                }
                long before = System.currentTimeMillis();
                long dueFrom;
                long dueTo;
                switch (setter) {
                    case "sec":
                        m.setDelayTimeSec(delay);
                        dueFrom = before + delay * 1000;
                        break;
                    case "ms":
                        m.setDelayTimeMs(delay);
                        dueFrom = before + delay;
                        break;
                    case "deliver":
                        m.setDeliverTimeMs(before + delay);
                        dueFrom = before + delay;
                        break;
                    default:
                        throw new IllegalArgumentException("unknown setter " + setter);
                }
                SendResult r = producer.send(m);
                long after = System.currentTimeMillis();
                dueTo = "deliver".equals(setter) ? dueFrom : dueFrom + (after - before);
                emit("event", "sent", "setter", setter, "key", key, "delay", delay,
                    "sendStatus", String.valueOf(r.getSendStatus()), "msgId", r.getMsgId(),
                    "sentAtMs", before, "ackedAtMs", after, "dueFromMs", dueFrom, "dueToMs", dueTo);
            }
            synchronized (pending) {
                long left;
                while (!pending.isEmpty() && (left = deadline - System.currentTimeMillis()) > 0) {
                    pending.wait(left);
                }
                ok &= pending.isEmpty();
                emit("event", "done", "topic", topic, "group", group, "missing", new ArrayList<>(pending));
            }
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
        return ok ? 0 : 2;
    }

    /** A plain send, retried while the new topic's route settles. */
    private static void send(DefaultMQProducer p, Message m, String setter, long delay, long deadline) throws Exception {
        while (true) {
            try {
                SendResult r = p.send(m);
                emit("event", "sent", "setter", setter, "key", m.getKeys(), "delay", delay,
                    "sendStatus", String.valueOf(r.getSendStatus()), "msgId", r.getMsgId());
                return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** One JSON line from key/value pairs, written with fastjson2 (a RocketMQ 5.3.1 dependency);
     * also TimerBench's. */
    static void emit(Object... kv) {
        Map<String, Object> event = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            event.put((String) kv[i], kv[i + 1]);
        }
        String line = JSON.toJSONString(event, JSONWriter.Feature.WriteNulls);
        synchronized (OUT_LOCK) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
