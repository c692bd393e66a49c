package io.ferrymq.spark;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;

/**
 * The scan of a plan: nothing is pushed down (the ranges were fixed on the driver), so the
 * builder, the scan and the batch are one object. One input partition per planned range.
 */
final class FerryMQScan implements ScanBuilder, Scan, Batch {

    private final ReadPlan plan;

    FerryMQScan(ReadPlan plan) {
        this.plan = plan;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return RowSchema.SCHEMA;
    }

    @Override
    public String description() {
        return "FerryMQ " + plan.ranges().size() + " planned ranges";
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        return plan.ranges().toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new RangeReaderFactory(plan.settings());
    }
}
