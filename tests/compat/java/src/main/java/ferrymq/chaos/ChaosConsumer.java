package ferrymq.chaos;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The fault-injection suite's consumer (docs/chaos.md): the official RocketMQ 4.9.7
 * DefaultMQPushConsumer (clustering, CONSUME_FROM_FIRST_OFFSET for a new group) writing one JSON
 * line per message its listener is handed.
 *
 * <pre>
 * java ferrymq.chaos.ChaosConsumer --namesrv H:P --topic T --group G --out FILE|-
 *      [--idle-ms 0] [--max-ms 3600000] [--threads 1] [--instance NAME] [--poll-namesrv-ms 1000]
 *      [--from first|last]
 * </pre>
 *
 * <p>History lines: {"op":"recv","key","digest","broker","queue","offset","t","consumer","session",
 * "reconsume","msgId","storeHost"}. "session" changes whenever the client starts a new reading of a
 * queue (a new ProcessQueue after a rebalance), where offsets may legitimately go back to the last
 * committed one. One consuming thread (the default) hands each queue's messages over in offset
 * order; more threads do not (the checker's nonmonotonic test then means nothing).
 *
 * <p>It stops on SIGTERM, after --idle-ms with no message once one arrived (0: never), or after
 * --max-ms; the consumer is shut down (offsets committed) and the file flushed and closed.
 * Progress: {"event":"ready"}, {"event":"progress","received","sessions"} each second with news,
 * {"event":"done"} on stdout (stderr with --out -).
 */
public final class ChaosConsumer {

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Jsonl.args(argv, "namesrv", "topic", "group", "out", "idle-ms", "max-ms", "threads",
            "instance", "poll-namesrv-ms", "from");
        String topic = ChaosProducer.need(a, "topic");
        String group = ChaosProducer.need(a, "group");
        String out = ChaosProducer.need(a, "out");
        long idleMs = Long.parseLong(a.getOrDefault("idle-ms", "0"));
        long maxMs = Long.parseLong(a.getOrDefault("max-ms", "3600000"));
        int threads = Integer.parseInt(a.getOrDefault("threads", "1"));
        String instance = a.getOrDefault("instance", "chaos-consumer-" + ProcessHandle.current().pid());

        Jsonl history = new Jsonl(out);
        boolean stderr = history.onStdout();
        history.write(Jsonl.obj("op", "meta", "role", "consumer", "instance", instance, "topic", topic, "group", group,
            "start", System.currentTimeMillis()));

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        if (a.containsKey("namesrv")) {
            consumer.setNamesrvAddr(a.get("namesrv"));
        }
        consumer.setInstanceName(instance);
        consumer.setPollNameServerInterval(Integer.parseInt(a.getOrDefault("poll-namesrv-ms", "1000")));
        consumer.setConsumeFromWhere("last".equals(a.get("from"))
            ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(threads);
        consumer.setConsumeThreadMax(threads);
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.subscribe(topic, "*");

        final AtomicLong received = new AtomicLong();
        final AtomicLong lastNanos = new AtomicLong(System.nanoTime());
        final AtomicLong sessionSeq = new AtomicLong();
        final Map<MessageQueue, Object[]> sessions = new ConcurrentHashMap<>();  // queue -> {ProcessQueue, id}
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            MessageQueue mq = context.getMessageQueue();
            ProcessQueue pq = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().get(mq);
            Object[] cur = sessions.get(mq);
            if (cur == null || cur[0] != pq) {
                cur = new Object[] {pq, Long.toString(sessionSeq.incrementAndGet())};
                sessions.put(mq, cur);
            }
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                history.write(Jsonl.obj("op", "recv", "key", m.getKeys(), "digest", Jsonl.digest(m.getBody()),
                    "broker", mq.getBrokerName(), "queue", m.getQueueId(), "offset", m.getQueueOffset(), "t", now,
                    "consumer", instance, "session", cur[1], "reconsume", m.getReconsumeTimes(),
                    "msgId", m.getMsgId(), "storeHost", String.valueOf(m.getStoreHost())));
                received.incrementAndGet();
            }
            lastNanos.set(System.nanoTime());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        final CountDownLatch stop = new CountDownLatch(1);
        final CountDownLatch finished = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.countDown();
            try {
                finished.await(15, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // exiting anyway
            }
            history.close();
        }, "chaos-consumer-stop"));

        consumer.start();
        Jsonl.say(stderr, Jsonl.obj("event", "ready", "clientId", consumer.buildMQClientId()));
        long begin = System.nanoTime();
        long shown = -1;
        long lastShown = System.nanoTime();
        String why = "max-ms";
        while (System.nanoTime() - begin < TimeUnit.MILLISECONDS.toNanos(maxMs)) {
            if (stop.await(100, TimeUnit.MILLISECONDS)) {
                why = "signal";
                break;
            }
            long n = received.get();
            if (idleMs > 0 && n > 0 && System.nanoTime() - lastNanos.get() > TimeUnit.MILLISECONDS.toNanos(idleMs)) {
                why = "idle";
                break;
            }
            if (n != shown && System.nanoTime() - lastShown >= 1_000_000_000L) {
                shown = n;
                lastShown = System.nanoTime();
                Jsonl.say(stderr, Jsonl.obj("event", "progress", "received", n, "sessions", sessionSeq.get()));
            }
        }
        consumer.shutdown();
        history.write(Jsonl.obj("op", "meta", "role", "consumer", "end", System.currentTimeMillis(),
            "received", received.get(), "stopped", why));
        history.close();
        Jsonl.say(stderr, Jsonl.obj("event", "done", "received", received.get(), "stopped", why));
        finished.countDown();
        System.exit(0);
    }

    private ChaosConsumer() {
    }
}
