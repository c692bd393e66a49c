package ferrymq.compat53;

import static ferrymq.compat53.Program.bytes;
import static ferrymq.compat53.Program.emit;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The Apache RocketMQ 5.3.1 remoting client's everyday features, every one in one JVM run, each
 * on a topic of its own (made beforehand by the caller) and signed with one ACL account:
 *
 * <pre>
 * java ferrymq.compat53.RemotingMatrix --namesrv HOST:PORT --prefix P --access-key AK --secret-key SK
 *      [--count N]        messages per send mode (default 10)
 *      [--timeout-ms MS]  deadline for each scenario's wait (default 60000)
 *      [--only S,...]     only these scenarios (tx, send, order, rr, acl), for debugging
 * </pre>
 *
 * <p>Topics: P_send (sync, async, oneway, batch; read by a concurrent push consumer and by lite
 * pull consumers in subscribe and assign mode), P_order (MessageQueueSelector by sharding key,
 * read by an orderly push consumer), P_tx (TransactionMQProducer: commit, rollback, unknown
 * resolved by check-back), P_rr (producer.request with a RequestCallback, answered through
 * MessageUtil.createReplyMessage).
 * Last, refused sends: the right access key with a wrong secret to P_send, and the account to
 * P_denied (made, but not granted to it).
 *
 * The transactions are sent first and awaited last.
 *
 * <p>stdout carries only JSON lines, each with "event" and "scenario": sent (key, mode,
 * sendStatus, queueId), send_failed (key, mode, error, class, cause, causeMessage, code),
 * received (group, key, body, queueId, queueOffset), checked (key, answer), reply (request,
 * reply), waited (ok, missing), done (ok). Every consumer stays up until the end, so a late
 * duplicate shows.
 * Exit code 0 = every wait was met; 2 = one was not; 1 = client error.
 */
public final class RemotingMatrix {

    private static final String[] TX_PLAN = {"commit=COMMIT/COMMIT", "rollback=ROLLBACK/ROLLBACK",
        "later-yes=UNKNOW/COMMIT", "later-no=UNKNOW/ROLLBACK"};
    private static final int SHARDS = 4;
    private static final int STEPS = 10;

    private final String namesrv;
    private final String prefix;
    private final RPCHook signer;
    private final String accessKey;
    private final int count;
    private final long timeoutMs;
    /** group -> keys not yet received, for the waits. */
    private final Map<String, Set<String>> pending = new ConcurrentHashMap<>();
    /** Every client's shutdown, run together at the end (some take seconds each). */
    private final List<Runnable> shutdowns = new ArrayList<>();
    /** What stops before them: the lite pull consumers' poll loops. */
    private final List<AtomicBoolean> pollLoops = new ArrayList<>();
    private final List<String> only;
    private int instances;

    private RemotingMatrix(Map<String, String> a) {
        namesrv = a.get("--namesrv");
        prefix = a.get("--prefix");
        accessKey = a.get("--access-key");
        signer = new AclClientRPCHook(new SessionCredentials(accessKey, a.get("--secret-key")));
        count = Integer.parseInt(a.get("--count"));
        timeoutMs = Long.parseLong(a.get("--timeout-ms"));
        only = a.containsKey("--only") ? List.of(a.get("--only").split(",")) : null;
    }

    public static void main(String[] argv) {
        Map<String, String> defaults = new LinkedHashMap<>();
        defaults.put("--count", "10");
        defaults.put("--timeout-ms", "60000");
        Program.main(argv, defaults, a -> new RemotingMatrix(a).run());
    }

    private int run() throws Exception {
        boolean ok = true;
        try {
            // transactions first, awaited last: their check-backs are the slowest, and the
            // scenarios between give a rolled back or duplicated delivery time to show
            Callable<Boolean> transactions = only == null || only.contains("tx") ? transactions() : () -> true;
            if (only == null || only.contains("send")) {
                ok &= sends();
            }
            if (only == null || only.contains("order")) {
                ok &= orderly();
            }
            if (only == null || only.contains("rr")) {
                ok &= requestReply();
            }
            if (only == null || only.contains("acl")) {
                refusals();
            }
            ok &= transactions.call();
        } finally {
            shutDown();
        }
        emit("event", "done", "scenario", "all", "ok", ok);
        return ok ? 0 : 2;
    }

    // -- scenarios ------------------------------------------------------------------------------

    private boolean sends() throws Exception {
        String topic = prefix + "_send";
        DefaultMQProducer producer = producer("send", signer);
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String key = "sync-" + i;
            keys.add(key);
            sent("send", "sync", key, producer.send(message(topic, key)));
        }
        CountDownLatch asyncAcks = new CountDownLatch(count);
        for (int i = 0; i < count; i++) {
            String key = "async-" + i;
            keys.add(key);
            producer.send(message(topic, key), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    sent("send", "async", key, r);
                    asyncAcks.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    failed("send", "async", key, e);
                    asyncAcks.countDown();
                }
            });
        }
        for (int i = 0; i < count; i++) {
            String key = "oneway-" + i;
            keys.add(key);
            producer.sendOneway(message(topic, key));
            emit("event", "sent", "scenario", "send", "mode", "oneway", "key", key, "sendStatus", null,
                "queueId", null);
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String key = "batch-" + i;
            keys.add(key);
            batch.add(message(topic, key));
        }
        SendResult b = producer.send(batch);
        for (Message m : batch) {
            sent("send", "batch", m.getKeys(), b);
        }
        asyncAcks.await(timeoutMs, TimeUnit.MILLISECONDS);

        String pushGroup = prefix + "_push";
        String subGroup = prefix + "_lite_sub";
        String assignGroup = prefix + "_lite_assign";
        for (String g : new String[] {pushGroup, subGroup, assignGroup}) {
            expect(g, keys);
        }
        DefaultMQPushConsumer push = pushConsumer(pushGroup);
        push.subscribe(topic, "*");
        push.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(m -> received("send", pushGroup, m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        push.start();

        DefaultLitePullConsumer subscribed = litePull(subGroup);
        subscribed.subscribe(topic, "*");
        subscribed.start();
        poll(subscribed, "send", subGroup);

        DefaultLitePullConsumer assigned = litePull(assignGroup);
        assigned.start();
        // a new group's assigned queues start at CONSUME_FROM_FIRST_OFFSET (a seek now would
        // cancel the pull tasks assign just started: the client then never pulls those queues)
        assigned.assign(assigned.fetchMessageQueues(topic));
        poll(assigned, "send", assignGroup);
        return await("send", pushGroup) & await("send", subGroup) & await("send", assignGroup);
    }

    private boolean orderly() throws Exception {
        String topic = prefix + "_order";
        DefaultMQProducer producer = producer("order", signer);
        MessageQueueSelector byShard = (mqs, msg, arg) -> mqs.get(Math.floorMod(arg.hashCode(), mqs.size()));
        List<String> keys = new ArrayList<>();
        for (int step = 0; step < STEPS; step++) {
            for (int shard = 0; shard < SHARDS; shard++) {
                String shardingKey = "order-" + shard;
                String key = shardingKey + ":" + step;
                keys.add(key);
                sent("order", "selector", key, producer.send(message(topic, key), byShard, shardingKey));
            }
        }
        String group = prefix + "_orderly";
        expect(group, keys);
        DefaultMQPushConsumer consumer = pushConsumer(group);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            msgs.forEach(m -> received("order", group, m));
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        return await("order", group);
    }

    /** Sends the transactions; returns the wait for their check-backs and deliveries. */
    private Callable<Boolean> transactions() throws Exception {
        String topic = prefix + "_tx";
        Map<String, String[]> plan = new LinkedHashMap<>();
        for (String entry : TX_PLAN) {
            plan.put(entry.split("=")[0], entry.split("=")[1].split("/"));
        }
        Set<String> unchecked = ConcurrentHashMap.newKeySet();
        for (Map.Entry<String, String[]> e : plan.entrySet()) {
            if ("UNKNOW".equals(e.getValue()[0])) {
                unchecked.add(e.getKey());
            }
        }
        TransactionMQProducer producer = new TransactionMQProducer(prefix + "_tx_producer", signer);
        configure(producer);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return state(plan.get(msg.getKeys())[0]);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String[] p = plan.get(msg.getKeys());
                String answer = p == null ? "UNKNOW" : p[1];
                emit("event", "checked", "scenario", "tx", "key", msg.getKeys(), "answer", answer);
                if (!"UNKNOW".equals(answer)) {
                    unchecked.remove(msg.getKeys());
                }
                return state(answer);
            }
        });
        producer.start();
        shutdowns.add(producer::shutdown);
        String group = prefix + "_tx_consumer";
        expect(group, List.of("commit", "later-yes"));
        for (String key : plan.keySet()) {
            TransactionSendResult r = producer.sendMessageInTransaction(message(topic, key), null);
            emit("event", "sent", "scenario", "tx", "mode", "transaction", "key", key,
                "sendStatus", String.valueOf(r.getSendStatus()), "queueId", r.getMessageQueue().getQueueId(),
                "localState", String.valueOf(r.getLocalTransactionState()));
        }
        DefaultMQPushConsumer consumer = pushConsumer(group);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(m -> received("tx", group, m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        return () -> {
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (!unchecked.isEmpty() && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
            }
            emit("event", "waited", "scenario", "tx", "group", "check-back", "ok", unchecked.isEmpty(),
                "missing", new ArrayList<>(unchecked));
            return await("tx", group) & unchecked.isEmpty();
        };
    }

    private boolean requestReply() throws Exception {
        String topic = prefix + "_rr";
        DefaultMQProducer replier = producer("replier", signer);
        DefaultMQPushConsumer service = pushConsumer(prefix + "_rr_service");
        service.subscribe(topic, "*");
        service.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received("rr", prefix + "_rr_service", m);
                try {
                    replier.send(MessageUtil.createReplyMessage(m, bytes("reply to " + m.getKeys())));
                } catch (Exception e) {
                    failed("rr", "reply", m.getKeys(), e);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        service.start();
        DefaultMQProducer requester = producer("requester", signer);
        // a reply reaches a requester the broker knows by its heartbeat: ping until one comes back
        long deadline = System.currentTimeMillis() + timeoutMs;
        for (int i = 0; request(requester, topic, "ping-" + i, 3000) == null; i++) {
            if (System.currentTimeMillis() > deadline) {
                emit("event", "waited", "scenario", "rr", "group", "ping", "ok", false, "missing", List.of());
                return false;
            }
        }
        boolean ok = true;
        for (int i = 0; i < 5; i++) {
            String key = "question-" + i;
            try {
                Message reply = request(requester, topic, key, 10000);
                emit("event", "reply", "scenario", "rr", "request", key,
                    "reply", new String(reply.getBody(), StandardCharsets.UTF_8));
            } catch (ExecutionException | TimeoutException e) {
                ok = false;
                failed("rr", "request", key, e instanceof ExecutionException ? e.getCause() : e);
            }
        }
        return ok;
    }

    /** The reply to one request; null when a ping was not answered in time. */
    private static Message request(DefaultMQProducer requester, String topic, String key, long timeout)
        throws Exception {
        // 5.3.1's request(msg, timeout) returns once the request is stored, before any reply
        // (apache/rocketmq#9319: RequestTimeoutException at once); its callback form calls
        // onSuccess(null) at that point, then onSuccess(reply) when the reply comes
        CompletableFuture<Message> replied = new CompletableFuture<>();
        requester.request(message(topic, key), new RequestCallback() {
            @Override
            public void onSuccess(Message reply) {
                if (reply != null) {
                    replied.complete(reply);
                }
            }

            @Override
            public void onException(Throwable e) {
                replied.completeExceptionally(e);
            }
        }, timeout);
        if (key.startsWith("ping-")) {
            try {
                return replied.get(timeout + 1000, TimeUnit.MILLISECONDS);
            } catch (ExecutionException | TimeoutException e) {
                return null;
            }
        }
        return replied.get(timeout + 5000, TimeUnit.MILLISECONDS);
    }

    /** Refused sends: the right access key with a wrong secret, then the account to a topic it was not granted. */
    private void refusals() throws Exception {
        DefaultMQProducer impostor = producer("wrong_secret",
            new AclClientRPCHook(new SessionCredentials(accessKey, "not-the-secret")));
        refusedSend(impostor, prefix + "_send", "refused-secret");
        refusedSend(producer("denied", signer), prefix + "_denied", "refused-topic");
    }

    private static void refusedSend(DefaultMQProducer producer, String topic, String key) {
        producer.setRetryTimesWhenSendFailed(0);
        try {
            sent("acl", "sync", key, producer.send(message(topic, key)));
        } catch (Exception e) {
            failed("acl", "sync", key, e);
        }
    }

    // -- clients --------------------------------------------------------------------------------

    private void shutDown() throws InterruptedException {
        pollLoops.forEach(running -> running.set(false));
        List<Thread> threads = new ArrayList<>();
        for (Runnable shutdown : shutdowns) {
            Thread t = new Thread(shutdown, "shutdown");
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join(30000);
        }
    }

    private void configure(ClientConfig c) {
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(prefix + "-" + instances++);  // a client instance (and signer) each
    }

    private DefaultMQProducer producer(String name, RPCHook hook) throws MQClientException {
        DefaultMQProducer p = new DefaultMQProducer(prefix + "_" + name, hook);
        configure(p);
        p.setSendMsgTimeout(10000);
        p.start();
        shutdowns.add(p::shutdown);
        return p;
    }

    private DefaultMQPushConsumer pushConsumer(String group) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, signer);
        configure(c);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        shutdowns.add(c::shutdown);
        return c;
    }

    private DefaultLitePullConsumer litePull(String group) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, signer);
        configure(c);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        shutdowns.add(c::shutdown);
        return c;
    }

    /** Polls on a thread of its own until the client is shut down. */
    private void poll(DefaultLitePullConsumer c, String scenario, String group) {
        AtomicBoolean running = new AtomicBoolean(true);
        pollLoops.add(running);
        Thread t = new Thread(() -> {
            while (running.get()) {
                try {
                    c.poll(200).forEach(m -> received(scenario, group, m));
                } catch (IllegalStateException e) {
                    return;  // shut down under the loop
                }
            }
        }, "poll-" + group);
        t.setDaemon(true);
        t.start();
    }

    // -- events ---------------------------------------------------------------------------------

    private static Message message(String topic, String key) {
        return new Message(topic, "Tag53", key, bytes("body of " + key));
    }

    private void expect(String group, Collection<String> keys) {
        Set<String> set = ConcurrentHashMap.newKeySet();
        set.addAll(keys);
        pending.put(group, set);
    }

    private void received(String scenario, String group, MessageExt m) {
        emit("event", "received", "scenario", scenario, "group", group, "key", m.getKeys(),
            "body", new String(m.getBody(), StandardCharsets.UTF_8), "queueId", m.getQueueId(),
            "queueOffset", m.getQueueOffset(), "reconsumeTimes", m.getReconsumeTimes());
        Set<String> left = pending.get(group);
        if (left != null) {
            synchronized (left) {
                left.remove(m.getKeys());
                left.notifyAll();
            }
        }
    }

    private boolean await(String scenario, String group) throws InterruptedException {
        Set<String> left = pending.get(group);
        long deadline = System.currentTimeMillis() + timeoutMs;
        synchronized (left) {
            long wait;
            while (!left.isEmpty() && (wait = deadline - System.currentTimeMillis()) > 0) {
                left.wait(wait);
            }
        }
        emit("event", "waited", "scenario", scenario, "group", group, "ok", left.isEmpty(),
            "missing", new ArrayList<>(left));
        return left.isEmpty();
    }

    private static void sent(String scenario, String mode, String key, SendResult r) {
        emit("event", "sent", "scenario", scenario, "mode", mode, "key", key,
            "sendStatus", String.valueOf(r.getSendStatus()), "queueId", r.getMessageQueue().getQueueId());
    }

    private static void failed(String scenario, String mode, String key, Throwable e) {
        Throwable cause = e.getCause();
        e.printStackTrace();
        emit("event", "send_failed", "scenario", scenario, "mode", mode, "key", key, "error", String.valueOf(e),
            "class", e.getClass().getName(), "cause", cause == null ? null : cause.getClass().getName(),
            "causeMessage", cause == null ? null : cause.getMessage(),
            "code", e instanceof MQBrokerException ? Integer.valueOf(((MQBrokerException) e).getResponseCode())
                : e instanceof MQClientException ? Integer.valueOf(((MQClientException) e).getResponseCode()) : null);
    }

    private static LocalTransactionState state(String name) {
        return "COMMIT".equals(name) ? LocalTransactionState.COMMIT_MESSAGE
            : "ROLLBACK".equals(name) ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
    }
}
