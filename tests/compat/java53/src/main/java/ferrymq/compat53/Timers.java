package ferrymq.compat53;

import static ferrymq.compat53.Program.bytes;
import static ferrymq.compat53.Program.emit;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageBatch;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

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
 *      [--recall MS]      also two timers due MS after the send on one queue ("recalled-",
 *                          "kept-"), the first cancelled the way a 5.3.1 producer can: a marker
 *                          message carrying TIMER_DEL_UNIQKEY (its message id) and the same
 *                          delivery time; then RECALL_MESSAGE (370, RocketMQ 5.3.2's request) sent
 *                          raw with a malformed handle, its answer as a recall_raw event
 *      [--batch sec:3,ms:3500,deliver:4200]  also batches (SEND_BATCH_MESSAGE; each batch's
 *                          outcome as a sent or send_failed event with setter "batch-..."):
 *                          send(Collection) of a plain message and one per setter:delay;
 *                          a plain message and one with setDelayTimeSec(--refuse-sec);
 *                          a MessageBatch built by hand (the client's send(Collection) refuses
 *                          a delay level) of a plain message and one with setDelayTimeLevel(2);
 *                          a MessageBatch with setDelayTimeLevel(1) on the batch itself
 *      [--timeout-ms MS]  deadline for the whole run (default 60000)
 * </pre>
 *
 * <p>First a plain message, consumed by a push consumer (so the consumer is in place), then the
 * refused one, then the timers. stdout carries only JSON lines with an "event" field, in the
 * format of ferrymq.compat.ProduceConsume: sent (setter, key, sentAtMs, ackedAtMs, dueFromMs,
 * dueToMs: the window the broker's due time lies in), send_failed (key, code, remark),
 * received (key, receivedAtMs, timerProps: which of the timer and delay-level properties the
 * delivered message still carries, timerValues: its TIMER_* properties, ...), done. Exit code 0 = every timer arrived; 2 = not all did
 * or a send went otherwise than expected; 1 = client error.
 */
public final class Timers {

    public static void main(String[] argv) {
        Map<String, String> defaults = new LinkedHashMap<>();
        defaults.put("--timers", "sec:6,ms:6500,deliver:7700");
        defaults.put("--timeout-ms", "60000");
        Program.main(argv, defaults, Timers::run);
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
        consumer.setConsumeMessageBatchMaxSize(32);  // one pull's messages in one call, in queue order
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                emit("event", "received", "topic", m.getTopic(), "key", m.getKeys(),
                    "body", new String(m.getBody(), StandardCharsets.UTF_8), "msgId", m.getMsgId(),
                    "receivedAtMs", now, "bornTimestamp", m.getBornTimestamp(),
                    "storeTimestamp", m.getStoreTimestamp(), "queueId", m.getQueueId(),
                    "reconsumeTimes", m.getReconsumeTimes(), "timerProps", timerProps(m),
                    "timerValues", timerValues(m));
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
                if (spec.isEmpty()) {
                    continue;  // --timers "": none
                }
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
            if (a.containsKey("--batch")) {
                batches(producer, topic, run, a.get("--batch"), Long.parseLong(a.getOrDefault("--refuse-sec", "0")),
                    pending);
            }
            if (a.containsKey("--recall")) {
                recall(producer, topic, run, Long.parseLong(a.get("--recall")), pending);
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

    private static final List<String> TIMER_PROPS = Arrays.asList(MessageConst.PROPERTY_TIMER_DELAY_SEC,
        MessageConst.PROPERTY_TIMER_DELAY_MS, MessageConst.PROPERTY_TIMER_DELIVER_MS,
        MessageConst.PROPERTY_DELAY_TIME_LEVEL);

    private static Map<String, String> timerValues(MessageExt m) {
        Map<String, String> out = new java.util.TreeMap<>();
        for (Map.Entry<String, String> p : m.getProperties().entrySet()) {
            if (p.getKey().startsWith("TIMER_")) {
                out.put(p.getKey(), p.getValue());
            }
        }
        return out;
    }

    private static List<String> timerProps(MessageExt m) {
        List<String> out = new ArrayList<>();
        for (String name : TIMER_PROPS) {
            if (m.getProperty(name) != null) {
                out.add(name);
            }
        }
        return out;
    }

    /** The four batches of --batch, each sent once; its messages are awaited if it is stored. */
    private static void batches(DefaultMQProducer producer, String topic, String run, String specs, long refuseSec,
        Set<String> pending) throws Exception {
        List<Message> timed = new ArrayList<>();
        timed.add(new Message(topic, "batch", "batch-plain-" + run, bytes("plain")));
        long before = System.currentTimeMillis();
        List<long[]> dues = new ArrayList<>();
        for (String spec : specs.split(",")) {
            String setter = spec.split(":")[0];
            long delay = Long.parseLong(spec.split(":")[1]);
            Message m = new Message(topic, "batch", "batch-" + setter + "-" + run, bytes(spec));
            switch (setter) {
                case "sec":
                    m.setDelayTimeSec(delay);
                    dues.add(new long[] {before + delay * 1000, 1});
                    break;
                case "ms":
                    m.setDelayTimeMs(delay);
                    dues.add(new long[] {before + delay, 1});
                    break;
                case "deliver":
                    m.setDeliverTimeMs(before + delay);
                    dues.add(new long[] {before + delay, 0});
                    break;
                default:
                    throw new IllegalArgumentException("unknown setter " + setter);
            }
            timed.add(m);
        }
        SendResult r = sendBatch(producer, timed, "batch-timers", pending);
        long after = System.currentTimeMillis();
        for (int i = 1; r != null && i < timed.size(); i++) {  // each timer's window, as for a single send
            long[] due = dues.get(i - 1);
            emit("event", "sent", "setter", "batch-timer", "key", timed.get(i).getKeys(),
                "dueFromMs", due[0], "dueToMs", due[1] == 1 ? due[0] + (after - before) : due[0]);
        }

        Message far = new Message(topic, "batch", "batch-far-" + run, bytes("far"));
        far.setDelayTimeSec(refuseSec);
        sendBatch(producer, Arrays.asList(new Message(topic, "batch", "batch-far-plain-" + run, bytes("plain")), far),
            "batch-far", pending);

        Message level = new Message(topic, "batch", "batch-level-" + run, bytes("level 2"));
        level.setDelayTimeLevel(2);
        long levelFrom = System.currentTimeMillis();
        if (sendBatch(producer, new MessageBatch(Arrays.asList(
            new Message(topic, "batch", "batch-level-plain-" + run, bytes("plain")), level)), "batch-level", pending) != null) {
            emit("event", "sent", "setter", "batch-level-2", "key", level.getKeys(), "dueFromMs", levelFrom + 5000);
        }

        MessageBatch onBatch = MessageBatch.generateFromList(Arrays.asList(
            new Message(topic, "batch", "batch-on-batch-" + run, bytes("level on the batch"))));
        onBatch.setDelayTimeLevel(1);
        sendBatch(producer, onBatch, "batch-on-batch", pending);
    }

    /** DefaultMQProducer.send(Collection): the client builds the batch; null if the broker refused it. */
    private static SendResult sendBatch(DefaultMQProducer producer, List<Message> msgs, String setter,
        Set<String> pending) throws Exception {
        return sendBatch(msgs, () -> producer.send(msgs), setter, pending);
    }

    /** A batch built by hand, as DefaultMQProducer.send(Collection) builds one, sent as a message. */
    private static SendResult sendBatch(DefaultMQProducer producer, MessageBatch batch, String setter,
        Set<String> pending) throws Exception {
        List<Message> msgs = new ArrayList<>();
        for (Message m : batch) {
            MessageClientIDSetter.setUniqID(m);
            msgs.add(m);
        }
        MessageClientIDSetter.setUniqID(batch);
        batch.setTopic(msgs.get(0).getTopic());
        batch.setBody(batch.encode());
        return sendBatch(msgs, () -> producer.send(batch), setter, pending);
    }

    interface Send {
        SendResult send() throws Exception;
    }

    private static SendResult sendBatch(List<Message> msgs, Send send, String setter, Set<String> pending)
        throws Exception {
        List<String> keys = new ArrayList<>();
        for (Message m : msgs) {
            keys.add(m.getKeys());
        }
        synchronized (pending) {
            pending.addAll(keys);
        }
        try {
            SendResult r = send.send();
            emit("event", "sent", "setter", setter, "keys", keys, "sendStatus", String.valueOf(r.getSendStatus()),
                "msgId", r.getMsgId(), "offsetMsgId", r.getOffsetMsgId(), "queueOffset", r.getQueueOffset());
            return r;
        } catch (MQBrokerException e) {
            synchronized (pending) {
                pending.removeAll(keys);
            }
            emit("event", "send_failed", "setter", setter, "keys", keys, "code", e.getResponseCode(),
                "remark", e.getErrorMessage());
            return null;
        }
    }

    /** Two timers due together on one queue; the first recalled by a marker (5.3.1's way). */
    private static void recall(DefaultMQProducer producer, String topic, String run, long delay, Set<String> pending)
        throws Exception {
        long due = System.currentTimeMillis() + delay;
        Message victim = new Message(topic, "timer", "recalled-" + run, bytes("recalled"));
        victim.setDeliverTimeMs(due);
        SendResult recalled = producer.send(victim);
        MessageQueue mq = recalled.getMessageQueue();
        emit("event", "sent", "setter", "recalled", "key", victim.getKeys(), "delay", delay,
            "sendStatus", String.valueOf(recalled.getSendStatus()), "msgId", recalled.getMsgId(),
            "dueFromMs", due, "dueToMs", due);
        Message kept = new Message(topic, "timer", "kept-" + run, bytes("kept"));
        kept.setDeliverTimeMs(due);
        synchronized (pending) {
            pending.add(kept.getKeys());
        }
        SendResult k = producer.send(kept, mq);
        emit("event", "sent", "setter", "kept", "key", kept.getKeys(), "delay", delay,
            "sendStatus", String.valueOf(k.getSendStatus()), "msgId", k.getMsgId(), "dueFromMs", due, "dueToMs", due);

        Message marker = new Message(topic, "timer", "marker-" + run, bytes("0"));
        marker.setDeliverTimeMs(due);
        MessageAccessor.putProperty(marker, MessageConst.PROPERTY_TIMER_DEL_UNIQKEY, recalled.getMsgId());
        SendResult m = producer.send(marker, mq);
        emit("event", "recall_marker", "key", marker.getKeys(), "sendStatus", String.valueOf(m.getSendStatus()),
            "recalls", recalled.getMsgId());

        // 5.3.1 has no recallMessage: RECALL_MESSAGE (370) by hand, as 5.3.2's client sends it
        RemotingCommand request = RemotingCommand.createRequestCommand(370, null);
        request.addExtField("producerGroup", producer.getProducerGroup());
        request.addExtField("topic", topic);
        request.addExtField("recallHandle", "not a recall handle!");
        String addr = producer.getDefaultMQProducerImpl().getMqClientFactory()
            .findBrokerAddressInPublish(mq.getBrokerName());
        RemotingCommand answer = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()
            .getRemotingClient().invokeSync(addr, request, 10000);
        emit("event", "recall_raw", "code", answer.getCode(), "remark", answer.getRemark());
    }

    /** A plain send, retried while the new topic's route settles. */
    private static void send(DefaultMQProducer p, Message m, String setter, long delay, long deadline) throws Exception {
        SendResult r = Program.sendOnceRouted(p, m, deadline);
        emit("event", "sent", "setter", setter, "key", m.getKeys(), "delay", delay,
            "sendStatus", String.valueOf(r.getSendStatus()), "msgId", r.getMsgId());
    }
}
