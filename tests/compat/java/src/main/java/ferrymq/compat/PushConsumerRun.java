package ferrymq.compat;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A long-running official DefaultMQPushConsumer (clustering, concurrently), for mixed Java/Python
 * consumer groups and the end-to-end latency benchmark.
 *
 * <pre>
 * java ferrymq.compat.PushConsumerRun --namesrv H:P --topic T --group G [--instance NAME]
 *      [--from first|last] [--run-ms MS] [--quiet true] [--fail-prefix P] [--max-reconsume-times N] [--expect N]
 *      [--orderly true]
 * </pre>
 *
 * <p>stdout, JSON lines: {"event":"ready","clientId":...}; {"event":"assigned","queues":[[topic,broker,id],...]}
 * whenever the queues it owns (of --topic) change; {"event":"received","key","queueId","queueOffset",
 * "storeTimestamp","receivedAt","reconsumeTimes"} per message (unless --quiet true; then one
 * {"event":"count","n"} when it changed, at most every 100 ms); {"event":"first"|"reached","n","at"} when the
 * first and the --expect'th message reached the listener; {"event":"done","received":n} after a clean shutdown, which happens
 * when stdin closes (or after --run-ms). Messages whose key starts with --fail-prefix are answered
 * RECONSUME_LATER (sent back to the broker: retry topic, delay levels, DLQ). --orderly true registers a
 * MessageListenerOrderly instead (queue locks: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
 */
public final class PushConsumerRun {

    public static void main(String[] argv) throws Exception {
        String namesrv = null, topic = null, group = null, from = "first";
        String instance = "java-" + ProcessHandle.current().pid();
        long runMs = 600_000;
        boolean quiet = false;
        String failPrefix = null;
        int maxReconsume = -1;
        long expect = 0;
        boolean orderly = false;
        for (int i = 0; i + 1 < argv.length; i += 2) {
            switch (argv[i]) {
                case "--namesrv": namesrv = argv[i + 1]; break;
                case "--topic": topic = argv[i + 1]; break;
                case "--group": group = argv[i + 1]; break;
                case "--instance": instance = argv[i + 1]; break;
                case "--from": from = argv[i + 1]; break;
                case "--run-ms": runMs = Long.parseLong(argv[i + 1]); break;
                case "--quiet": quiet = Boolean.parseBoolean(argv[i + 1]); break;
                case "--fail-prefix": failPrefix = argv[i + 1]; break;
                case "--max-reconsume-times": maxReconsume = Integer.parseInt(argv[i + 1]); break;
                case "--expect": expect = Long.parseLong(argv[i + 1]); break;
                case "--orderly": orderly = Boolean.parseBoolean(argv[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        if (namesrv == null || topic == null || group == null) {
            throw new IllegalArgumentException("--namesrv, --topic and --group are required");
        }
        final String theTopic = topic;
        final boolean silent = quiet;
        final String failing = failPrefix;
        final long expected = expect;
        final long[] received = {0};
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        consumer.setPollNameServerInterval(1000);
        consumer.setConsumeFromWhere("last".equals(from)
            ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(maxReconsume);
        consumer.subscribe(topic, "*");
        if (orderly) {
            consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
                record(msgs, received, expected, silent);
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                boolean fail = false;
                for (MessageExt m : msgs) {
                    fail |= failing != null && m.getKeys() != null && m.getKeys().startsWith(failing);
                }
                record(msgs, received, expected, silent);
                return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        consumer.start();
        ProduceConsume.emit(ProduceConsume.obj("event", "ready", "clientId", consumer.buildMQClientId()));

        Thread watcher = new Thread(() -> {
            String last = "";
            long lastCount = -1;
            while (true) {
                Set<String> now = new TreeSet<>();
                List<Object> rows = new ArrayList<>();
                for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                    .getProcessQueueTable().keySet()) {
                    if (mq.getTopic().equals(theTopic)) {
                        now.add(mq.getBrokerName() + "#" + mq.getQueueId());
                        List<Object> row = new ArrayList<>();
                        row.add(mq.getTopic());
                        row.add(mq.getBrokerName());
                        row.add(mq.getQueueId());
                        rows.add(row);
                    }
                }
                String key = now.toString();
                if (!key.equals(last)) {
                    last = key;
                    ProduceConsume.emit(ProduceConsume.obj("event", "assigned", "queues", rows));
                }
                if (silent) {
                    long n;
                    synchronized (received) {
                        n = received[0];
                    }
                    if (n != lastCount) {
                        lastCount = n;
                        ProduceConsume.emit(ProduceConsume.obj("event", "count", "n", n));
                    }
                }
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        watcher.setDaemon(true);
        watcher.start();

        // Run until stdin closes (the test or benchmark is done with us) or --run-ms passes.
        CountDownLatch closed = new CountDownLatch(1);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // input is ignored; only its end matters
                }
            } catch (IOException ignored) {
                // a broken stdin counts as closed
            }
            closed.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        closed.await(runMs, TimeUnit.MILLISECONDS);
        consumer.shutdown();
        synchronized (received) {
            ProduceConsume.emit(ProduceConsume.obj("event", "done", "received", received[0]));
        }
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    private static void record(List<MessageExt> msgs, long[] received, long expected, boolean silent) {
        long now = System.currentTimeMillis();
        for (MessageExt m : msgs) {
            long n;
            synchronized (received) {
                n = ++received[0];
            }
            if (n == 1 || n == expected) {
                // for throughput: when the first and the expected last message reached the listener
                ProduceConsume.emit(ProduceConsume.obj("event", n == 1 ? "first" : "reached", "n", n, "at", now));
            }
            if (!silent) {
                ProduceConsume.emit(ProduceConsume.obj("event", "received", "key", m.getKeys(), "topic", m.getTopic(),
                    "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(),
                    "storeTimestamp", m.getStoreTimestamp(), "receivedAt", now,
                    "reconsumeTimes", m.getReconsumeTimes(), "thread", Thread.currentThread().getName()));
            }
        }
    }

    private PushConsumerRun() {
    }
}
