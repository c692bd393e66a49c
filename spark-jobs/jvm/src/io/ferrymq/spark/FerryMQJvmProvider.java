package io.ferrymq.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("ferrymq-jvm")}: reads offset ranges planned on the driver by
 * {@code ferrymq_spark.jvm_reader} (option {@code plan}), pulling them from the brokers in the
 * executors' JVMs, with no Python worker. The schema is always {@link RowSchema#SCHEMA}.
 */
public final class FerryMQJvmProvider implements TableProvider, DataSourceRegister {

    @Override
    public String shortName() {
        return "ferrymq-jvm";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return RowSchema.SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new FerryMQTable(ReadPlan.fromOptions(new CaseInsensitiveStringMap(properties)));
    }
}
