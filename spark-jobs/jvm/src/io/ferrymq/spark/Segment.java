package io.ferrymq.spark;

/**
 * Records a pull returned, where they lie in the response frame, and the queue offsets wanted
 * from them: [first, end) (queues are dense, so the body holds offsets from {@code first} on).
 */
record Segment(byte[] buf, int offset, int length, long first, long end) {
}
