package ferrymq.compat;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The official 4.x client's request-reply: {@code DefaultMQProducer.request()} and a push
 * consumer answering with {@code MessageUtil.createReplyMessage}.
 *
 * <pre>
 * java ferrymq.compat.RequestReply --namesrv HOST:PORT --topic T --role requester|responder|both
 *      [--count N] [--timeout-ms MS]
 * </pre>
 *
 * stdout: "replied" (responder: request body), "reply" (requester: request, reply body, ms),
 * "request_failed", "done". A requester exits 0 when all N requests got their reply; a
 * responder alone serves until --timeout-ms.
 */
public final class RequestReply {
    public static void main(String[] argv) throws Exception {
        Map<String, String> opt = new LinkedHashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) opt.put(argv[i].substring(2), argv[i + 1]);
        String ns = opt.get("namesrv"), topic = opt.get("topic"), role = opt.getOrDefault("role", "both");
        int count = Integer.parseInt(opt.getOrDefault("count", "5"));
        long timeoutMs = Long.parseLong(opt.getOrDefault("timeout-ms", "30000"));
        String run = Long.toHexString(System.nanoTime());

        DefaultMQProducer replier = new DefaultMQProducer("rr_replier_" + run);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("rr_service_" + run);
        if (!role.equals("requester")) {
            replier.setNamesrvAddr(ns);
            replier.setInstanceName("replier-" + run);
            replier.start();
            consumer.setNamesrvAddr(ns);
            consumer.setInstanceName("service-" + run);
            consumer.setPollNameServerInterval(1000);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (List<MessageExt> msgs, org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext ctx) -> {
                for (MessageExt m : msgs) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    try {
                        Message reply = MessageUtil.createReplyMessage(m, ("reply to " + body).getBytes(StandardCharsets.UTF_8));
                        replier.send(reply, 3000);
                        ProduceConsume.emit(ProduceConsume.obj("event", "replied", "request", body));
                    } catch (Exception e) {
                        ProduceConsume.emit(ProduceConsume.obj("event", "reply_failed", "request", body, "error", String.valueOf(e)));
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
        }
        boolean ok = true;
        if (!role.equals("responder")) {
            DefaultMQProducer requester = new DefaultMQProducer("rr_requester_" + run);
            requester.setNamesrvAddr(ns);
            requester.setInstanceName("requester-" + run);
            requester.start();
            for (int i = 0; i < count; i++) {
                String body = "question-" + i;
                long t0 = System.currentTimeMillis();
                try {
                    Message reply = requester.request(new Message(topic, body.getBytes(StandardCharsets.UTF_8)), 10000);
                    ProduceConsume.emit(ProduceConsume.obj("event", "reply", "request", body,
                        "reply", new String(reply.getBody(), StandardCharsets.UTF_8), "ms", System.currentTimeMillis() - t0));
                } catch (Exception e) {
                    ok = false;
                    ProduceConsume.emit(ProduceConsume.obj("event", "request_failed", "request", body, "error", String.valueOf(e)));
                }
            }
        } else {
            Thread.sleep(timeoutMs);
        }
        ProduceConsume.emit(ProduceConsume.obj("event", "done", "ok", ok));
        System.out.flush();
        Runtime.getRuntime().halt(ok ? 0 : 2);
    }
}
