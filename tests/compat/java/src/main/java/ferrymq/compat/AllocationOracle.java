package ferrymq.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;

import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByConfig;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByMachineRoom;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RocketMQ's own allocation strategies as an oracle for FerryMQ's (tests/compat/test_allocation_oracle.py).
 *
 * <p>stdin: one JSON case a line, {"strategy": "AVG|AVG_BY_CIRCLE|CONSISTENT_HASH|CONFIG|MACHINE_ROOM",
 * "group": g, "cid": me, "mqs": [[topic, broker, queueId], ...], "cids": [...], "idcs": [...],
 * "config": [[topic, broker, queueId], ...], "virtualNodes": n}. stdout: one line per case,
 * {"result": [[topic, broker, queueId], ...]} or {"error": "..."}.
 */
public final class AllocationOracle {

    public static void main(String[] argv) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().isEmpty()) {
                continue;
            }
            JSONObject c = JSON.parseObject(line);
            Map<String, Object> out;
            try {
                List<MessageQueue> result = strategy(c).allocate(c.getString("group"), c.getString("cid"),
                    queues(c.getJSONArray("mqs")), c.getJSONArray("cids").toJavaList(String.class));
                List<Object> rows = new ArrayList<>();
                for (MessageQueue mq : result) {
                    List<Object> row = new ArrayList<>();
                    row.add(mq.getTopic());
                    row.add(mq.getBrokerName());
                    row.add(mq.getQueueId());
                    rows.add(row);
                }
                out = ProduceConsume.obj("result", rows);
            } catch (RuntimeException e) {
                out = ProduceConsume.obj("error", String.valueOf(e));
            }
            ProduceConsume.emit(out);
        }
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    private static AllocateMessageQueueStrategy strategy(JSONObject c) {
        switch (c.getString("strategy")) {
            case "AVG":
                return new AllocateMessageQueueAveragely();
            case "AVG_BY_CIRCLE":
                return new AllocateMessageQueueAveragelyByCircle();
            case "CONSISTENT_HASH":
                return new AllocateMessageQueueConsistentHash(c.containsKey("virtualNodes") ? c.getIntValue("virtualNodes") : 10);
            case "CONFIG": {
                AllocateMessageQueueByConfig s = new AllocateMessageQueueByConfig();
                s.setMessageQueueList(queues(c.getJSONArray("config")));
                return s;
            }
            case "MACHINE_ROOM": {
                AllocateMessageQueueByMachineRoom s = new AllocateMessageQueueByMachineRoom();
                s.setConsumeridcs(new HashSet<>(c.getJSONArray("idcs").toJavaList(String.class)));
                return s;
            }
            default:
                throw new IllegalArgumentException("unknown strategy " + c.getString("strategy"));
        }
    }

    private static List<MessageQueue> queues(JSONArray rows) {
        List<MessageQueue> out = new ArrayList<>();
        for (int i = 0; i < rows.size(); i++) {
            JSONArray r = rows.getJSONArray(i);
            out.add(new MessageQueue(r.getString(0), r.getString(1), r.getIntValue(2)));
        }
        return out;
    }

    private AllocationOracle() {
    }
}
