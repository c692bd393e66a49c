package io.ferrymq.spark;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;

/**
 * PULL_MESSAGE (code 11) as the Python client's raw pull sends it: the subscription in the
 * request ("*", SUBSCRIPTION flag), no commit offset, no suspension (the range exists: nothing
 * is waited for), and the answer's code mapped to a pull status (docs/wire-format.md#response-codes, #pull-headers).
 */
final class PullMessage {

    static final int CODE = 11;
    private static final int SYS_FLAG_SUBSCRIPTION = 0x4;

    /** The PullMessageRequestHeader fields of a pull of up to {@code maxNums} messages from {@code offset}. */
    static Map<String, String> fields(String consumerGroup, QueueRange range, long offset, int maxNums) {
        Map<String, String> fields = new HashMap<>();
        fields.put("consumerGroup", consumerGroup);
        fields.put("topic", range.topic());
        fields.put("queueId", Integer.toString(range.queueId()));
        fields.put("queueOffset", Long.toString(offset));
        fields.put("maxMsgNums", Integer.toString(maxNums));
        fields.put("sysFlag", Integer.toString(SYS_FLAG_SUBSCRIPTION));
        fields.put("commitOffset", "0");
        fields.put("suspendTimeoutMillis", "0");
        fields.put("subscription", "*");
        fields.put("subVersion", "0");
        fields.put("expressionType", "TAG");
        return fields;
    }

    /** The answer to a pull from {@code offset}; an IOException for codes that are no pull status (a refusal). */
    static PullResult result(RemotingResponse response, QueueRange range, long offset, String addr) throws IOException {
        PullResult.Status status = switch (response.code()) {
            case 0 -> PullResult.Status.FOUND;
            case 19 -> PullResult.Status.NO_NEW_MSG;
            case 20 -> PullResult.Status.NO_MATCHED_MSG;
            case 21 -> PullResult.Status.OFFSET_ILLEGAL;
            default -> throw new IOException("FerryMQ broker " + addr + " refused PULL_MESSAGE of " + range.label()
                    + " at offset " + offset + ": code " + response.code() + " (" + response.remark() + ")");
        };
        return new PullResult(status, response.longField("nextBeginOffset", offset), response.longField("minOffset", 0),
                response.longField("maxOffset", 0), response);
    }

    private PullMessage() {
    }
}
