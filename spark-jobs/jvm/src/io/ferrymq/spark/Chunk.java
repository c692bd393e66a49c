package io.ferrymq.spark;

import java.util.ArrayList;
import java.util.List;

/**
 * Offsets [start, end) of a range, fetched by as many pulls as the broker's per-pull caps need,
 * with the rules of the Python reader's {@code fetch_chunk}: FOUND bodies are kept, removed
 * records the broker skips (NO_MATCHED_MSG) are passed over, OFFSET_MOVED to the queue's
 * minimum means retention removed the head, anything else means the broker lost offsets the
 * plan saw (its tail), which ends the chunk.
 */
final class Chunk {

    final long start;
    final long end;
    private long offset;
    private final List<Segment> segments = new ArrayList<>();
    private long removedUntil = -1;  // the queue's minimum, when offsets from start on were removed
    private String problem;  // offsets the broker does not have, said as the data-loss message says it

    Chunk(long start, long end) {
        this.start = start;
        this.end = end;
        this.offset = start;
    }

    /** Where the next pull starts. */
    long offset() {
        return offset;
    }

    boolean done() {
        return problem != null || offset >= end;
    }

    void accept(PullResult result) {
        long next = result.nextBeginOffset();
        PullResult.Status status = result.status();
        if (status == PullResult.Status.FOUND && next > offset) {
            RemotingResponse r = result.response();
            segments.add(new Segment(r.frame(), r.bodyOffset(), r.bodyLength(), offset, Math.min(next, end)));
            offset = next;
        } else if (status == PullResult.Status.NO_MATCHED_MSG && next > offset) {
            offset = next;
        } else if (status == PullResult.Status.OFFSET_ILLEGAL && offset < next && next == result.minOffset()) {
            removedUntil = next;
            offset = next;
        } else {
            problem = "offsets " + offset + ".." + (end - 1) + " planned for this read are not on the broker (pull "
                    + "answered " + status + ", queue min " + result.minOffset() + ", max " + result.maxOffset() + ")";
        }
    }

    List<Segment> segments() {
        return segments;
    }

    /** The queue's minimum when retention removed offsets of this chunk, else -1. */
    long removedUntil() {
        return removedUntil;
    }

    /** Offsets the broker lost, or null. */
    String problem() {
        return problem;
    }
}
