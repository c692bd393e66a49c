package io.ferrymq.spark;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * Fetches a range's records in order, as the Python reader's {@code read_range}: in chunks of
 * pullBatchSize offsets (offsets are dense, so every chunk's start is known in advance) with up
 * to pullPipelineDepth chunks' pulls in flight on one connection, so the broker works while the
 * caller turns the previous records into rows. Data loss is reported when a chunk's turn comes.
 */
final class RangeFetcher {

    private final QueueRange range;
    private final ReadSettings settings;
    private final RemotingClient client;
    private final ArrayDeque<Chunk> chunks = new ArrayDeque<>();  // in offset order, each with a pull in flight until done
    private final Map<Integer, Chunk> byOpaque = new HashMap<>();
    private Iterator<Segment> ready;  // segments of the chunk whose turn it is
    private long nextStart;
    private long skipTo;  // raised past removed offsets, so later chunks start at the queue's minimum

    RangeFetcher(QueueRange range, ReadSettings settings, RemotingClient client) {
        this.range = range;
        this.settings = settings;
        this.client = client;
        this.nextStart = range.start();
        this.skipTo = range.start();
    }

    /** The next records of the range, in offset order; null once it is read. */
    Segment next() throws IOException {
        while (ready == null || !ready.hasNext()) {
            fill();
            Chunk head = chunks.pollFirst();
            if (head == null) {
                return null;
            }
            while (!head.done()) {
                receive();
            }
            report(head);
            fill();  // pullPipelineDepth chunks in flight again while this one becomes rows
            ready = head.segments().iterator();
        }
        return ready.next();
    }

    /** Starts chunks until pipelineDepth are in flight or the range is covered. */
    private void fill() throws IOException {
        while (chunks.size() < settings.pullPipelineDepth()) {
            long start = Math.max(nextStart, skipTo);
            if (start >= range.end()) {
                return;
            }
            Chunk chunk = new Chunk(start, Math.min(start + settings.pullBatchSize(), range.end()));
            nextStart = start + settings.pullBatchSize();
            chunks.addLast(chunk);
            pull(chunk);
        }
    }

    private void pull(Chunk chunk) throws IOException {
        int maxNums = (int) Math.min(settings.pullBatchSize(), chunk.end - chunk.offset());
        int opaque = client.send(PullMessage.CODE,
                PullMessage.fields(settings.consumerGroup(), range, chunk.offset(), maxNums));
        byOpaque.put(opaque, chunk);
    }

    /** Takes one response and gives it to its chunk, which pulls again for the rest when it is short. */
    private void receive() throws IOException {
        RemotingResponse response = client.receive();
        Chunk chunk = byOpaque.remove(response.opaque());
        if (chunk == null) {
            throw new IOException("FerryMQ broker " + client.addr() + " answered opaque " + response.opaque()
                    + ", which no pull of " + range.label() + " is waiting for");
        }
        chunk.accept(PullMessage.result(response, range, chunk.offset(), client.addr()));
        if (!chunk.done()) {
            pull(chunk);
        }
    }

    private void report(Chunk chunk) throws IOException {
        long removedUntil = chunk.removedUntil();
        if (removedUntil >= 0 && chunk.start >= skipTo) {  // each removed run once
            DataLoss.report(settings.failOnDataLoss(), range.label() + ": offsets " + chunk.start + ".."
                    + (Math.min(removedUntil, range.end()) - 1) + " were removed from the queue (its minimum is now "
                    + removedUntil + ")");
        }
        if (removedUntil >= 0) {
            skipTo = Math.max(skipTo, removedUntil);
        }
        if (chunk.problem() != null) {
            DataLoss.report(settings.failOnDataLoss(), range.label() + ": " + chunk.problem());
        }
    }
}
