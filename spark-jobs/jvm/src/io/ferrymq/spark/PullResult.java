package io.ferrymq.spark;

/**
 * One PULL_MESSAGE answer, as the Python client's PullResult: the status its code maps to, the
 * offsets of the response header, and (FOUND) the records in the response frame.
 */
record PullResult(Status status, long nextBeginOffset, long minOffset, long maxOffset, RemotingResponse response) {

    /** The pull statuses of RocketMQ's client, named as the Python client names them. */
    enum Status { FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL }
}
