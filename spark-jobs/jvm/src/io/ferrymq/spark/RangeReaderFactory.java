package io.ferrymq.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** Sent to the executors: makes each task's reader of its planned range. */
final class RangeReaderFactory implements PartitionReaderFactory {

    private static final long serialVersionUID = 1L;

    private final ReadSettings settings;

    RangeReaderFactory(ReadSettings settings) {
        this.settings = settings;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        return new RangeReader((QueueRange) partition, settings);
    }
}
