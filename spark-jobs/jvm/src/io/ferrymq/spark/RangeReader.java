package io.ferrymq.spark;

import java.io.IOException;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * One task: the rows of offsets [start, end) of one queue, exactly, from one connection to the
 * broker the plan named (opened at the first row, so a failure is the task's IOException).
 */
final class RangeReader implements PartitionReader<InternalRow> {

    private final QueueRange range;
    private final ReadSettings settings;
    private final RecordDecoder decoder;
    private RemotingClient client;
    private RangeFetcher fetcher;
    private InternalRow current;

    RangeReader(QueueRange range, ReadSettings settings) {
        this.range = range;
        this.settings = settings;
        this.decoder = new RecordDecoder(range);
    }

    @Override
    public boolean next() throws IOException {
        if (fetcher == null) {
            client = RemotingClient.connect(range.addr(), settings.timeoutMillis(), settings.credentials());
            fetcher = new RangeFetcher(range, settings, client);
        }
        while ((current = decoder.next()) == null) {
            Segment segment = fetcher.next();
            if (segment == null) {
                return false;
            }
            decoder.reset(segment);
        }
        return true;
    }

    @Override
    public InternalRow get() {
        return current;
    }

    @Override
    public void close() throws IOException {
        if (client != null) {
            client.close();
        }
    }
}
