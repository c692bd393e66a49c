package io.ferrymq.spark;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A planned batch read, as the table Spark scans. */
final class FerryMQTable implements SupportsRead {

    private final ReadPlan plan;

    FerryMQTable(ReadPlan plan) {
        this.plan = plan;
    }

    @Override
    public String name() {
        return "ferrymq-jvm";
    }

    @Override
    public Column[] columns() {
        return RowSchema.columns();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new FerryMQScan(plan);
    }
}
