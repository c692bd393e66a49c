package io.ferrymq.spark;

import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * What {@code ferrymq_spark.jvm_reader} planned, from the reader's options: the JSON option
 * {@code plan} (ranges with their broker addresses, and how to pull them), and the ACL keys in
 * options of their own ({@code accessKey}, {@code secretKey}, {@code securityToken}), whose
 * names Spark's redaction hides wherever it shows options.
 */
record ReadPlan(List<QueueRange> ranges, ReadSettings settings) {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String PLAN = "the plan";
    private static final String RANGE = "a range";

    static ReadPlan fromOptions(CaseInsensitiveStringMap options) {
        String text = options.get("plan");
        if (text == null || text.isBlank()) {
            throw new IllegalArgumentException("format ferrymq-jvm needs the option plan, the JSON that "
                    + "ferrymq_spark.jvm_reader.read_batch writes: read through that function");
        }
        JsonNode root;
        try {
            root = JSON.readTree(text);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("option plan is not valid JSON: " + e.getOriginalMessage(), e);
        }
        if (root == null || !root.isObject()) {
            throw new IllegalArgumentException("option plan must be a JSON object");
        }
        JsonNode planned = required(root, "ranges", PLAN);
        if (!planned.isArray()) {
            throw new IllegalArgumentException("option plan: ranges must be a JSON array");
        }
        List<QueueRange> ranges = new ArrayList<>();
        for (JsonNode r : planned) {
            ranges.add(new QueueRange(required(r, "topic", RANGE).asText(), required(r, "brokerName", RANGE).asText(),
                    (int) number(r, "queueId"), number(r, "start"), number(r, "end"), required(r, "addr", RANGE).asText()));
        }
        Credentials credentials = credentials(options);
        ReadSettings settings = new ReadSettings(required(root, "consumerGroup", PLAN).asText(),
                required(root, "failOnDataLoss", PLAN).asBoolean(), positive(root, "pullBatchSize"),
                positive(root, "pullPipelineDepth"), positive(root, "timeoutMillis"), credentials);
        return new ReadPlan(List.copyOf(ranges), settings);
    }

    private static Credentials credentials(CaseInsensitiveStringMap options) {
        String accessKey = options.get("accessKey");
        if (accessKey == null || accessKey.isEmpty()) {
            return null;
        }
        String secretKey = options.get("secretKey");
        if (secretKey == null || secretKey.isEmpty()) {
            throw new IllegalArgumentException("option accessKey needs the option secretKey");
        }
        return new Credentials(accessKey, secretKey, options.get("securityToken"));
    }

    private static JsonNode required(JsonNode node, String name, String where) {
        JsonNode value = node.get(name);
        if (value == null || value.isNull()) {
            throw new IllegalArgumentException("option plan: " + where + " has no field " + name);
        }
        return value;
    }

    private static long number(JsonNode node, String name) {
        JsonNode value = required(node, name, RANGE);
        if (!value.canConvertToLong()) {
            throw new IllegalArgumentException("option plan: a range's " + name + " must be an integer, got " + value);
        }
        return value.asLong();
    }

    private static int positive(JsonNode node, String name) {
        JsonNode value = required(node, name, PLAN);
        if (!value.canConvertToInt() || value.asInt() < 1) {
            throw new IllegalArgumentException("option plan: " + name + " must be a positive integer, got " + value);
        }
        return value.asInt();
    }
}
