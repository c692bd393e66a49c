package io.ferrymq.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One task's work: offsets [start, end) of one queue, read from the broker at {@code addr}. */
record QueueRange(String topic, String brokerName, int queueId, long start, long end, String addr)
        implements InputPartition {

    /** How the Python side names a queue in its messages (offsets.queue_label). */
    String label() {
        return topic + "@" + brokerName + "#" + queueId;
    }
}
