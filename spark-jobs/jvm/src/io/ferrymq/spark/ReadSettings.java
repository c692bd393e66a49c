package io.ferrymq.spark;

import java.io.Serializable;

/**
 * How every task of a read pulls: the plan's settings, sent to the executors with the reader
 * factory. {@code credentials} is null when the brokers need no ACL signature.
 */
record ReadSettings(String consumerGroup, boolean failOnDataLoss, int pullBatchSize, int pullPipelineDepth,
                    int timeoutMillis, Credentials credentials) implements Serializable {
}
