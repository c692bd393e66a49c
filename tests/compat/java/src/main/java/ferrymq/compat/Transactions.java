package ferrymq.compat;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The official 4.x TransactionMQProducer as a scripted peer.
 *
 * <pre>
 * java ferrymq.compat.Transactions --namesrv HOST:PORT --topic T --group G
 *      --plan KEY=LOCAL/CHECK,...   LOCAL, CHECK: COMMIT | ROLLBACK | UNKNOW; what
 *                                   executeLocalTransaction and checkLocalTransaction return
 *      --send KEY,...               keys to send in a transaction (default: every key of the plan;
 *                                   "none": send nothing, only answer checks)
 *      --until-checked KEY,...      stay until each of these was checked back (default: leave
 *                                   once sent)
 *      --timeout-ms MS              deadline for the above (default 60000)
 * </pre>
 *
 * stdout: JSON lines "sent" (key, status, localState, msgId), "checked" (key, answer, checkTimes),
 * "done" (ok). Exit 0 when every send succeeded and every awaited check came.
 */
public final class Transactions {
    public static void main(String[] argv) throws Exception {
        Map<String, String> opt = new LinkedHashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) opt.put(argv[i].substring(2), argv[i + 1]);
        Map<String, String[]> plan = new LinkedHashMap<>();
        for (String entry : opt.getOrDefault("plan", "").split(",")) {
            if (entry.isEmpty()) continue;
            String[] kv = entry.split("=", 2);
            plan.put(kv[0], kv[1].split("/", 2));
        }
        String send = opt.getOrDefault("send", String.join(",", plan.keySet()));
        Set<String> awaited = ConcurrentHashMap.newKeySet();
        for (String k : opt.getOrDefault("until-checked", "").split(",")) if (!k.isEmpty()) awaited.add(k);
        long deadline = System.currentTimeMillis() + Long.parseLong(opt.getOrDefault("timeout-ms", "60000"));

        TransactionMQProducer producer = new TransactionMQProducer(opt.get("group"));
        producer.setNamesrvAddr(opt.get("namesrv"));
        producer.setInstanceName("tx-" + System.nanoTime());
        producer.setPollNameServerInterval(1000);
        producer.setHeartbeatBrokerInterval(1000);
        producer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return state(plan.get(msg.getKeys())[0]);
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String[] p = plan.get(msg.getKeys());
                String answer = p == null ? "UNKNOW" : p[1];
                ProduceConsume.emit(ProduceConsume.obj("event", "checked", "key", msg.getKeys(), "answer", answer,
                    "checkTimes", msg.getProperty("TRANSACTION_CHECK_TIMES")));
                if (!answer.equals("UNKNOW")) awaited.remove(msg.getKeys());
                return state(answer);
            }
        });
        producer.start();
        boolean ok = true;
        if (!send.equals("none")) {
            for (String key : send.split(",")) {
                Message msg = new Message(opt.get("topic"), "TagTx", key, ("tx " + key).getBytes(StandardCharsets.UTF_8));
                TransactionSendResult r = producer.sendMessageInTransaction(msg, null);
                ok &= r.getSendStatus().name().equals("SEND_OK");
                ProduceConsume.emit(ProduceConsume.obj("event", "sent", "key", key, "status", r.getSendStatus().name(),
                    "localState", String.valueOf(r.getLocalTransactionState()), "msgId", r.getMsgId()));
            }
        }
        while (!awaited.isEmpty() && System.currentTimeMillis() < deadline) Thread.sleep(50);
        ok &= awaited.isEmpty();
        Thread.sleep(300); // the last END_TRANSACTION is oneway: let it leave the socket
        ProduceConsume.emit(ProduceConsume.obj("event", "done", "ok", ok, "unchecked", String.join(",", awaited)));
        System.out.flush();
        Runtime.getRuntime().halt(ok ? 0 : 2);
    }

    private static LocalTransactionState state(String name) {
        return LocalTransactionState.valueOf(name.equals("COMMIT") ? "COMMIT_MESSAGE"
            : name.equals("ROLLBACK") ? "ROLLBACK_MESSAGE" : "UNKNOW");
    }
}
